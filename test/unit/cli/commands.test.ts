import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import Login from '../../../commands/login.js'
import Logout from '../../../commands/logout.js'
import Whoami from '../../../commands/whoami.js'
import ApiKeyCreate from '../../../commands/api-key/create.js'
import ApiKeyDelete from '../../../commands/api-key/delete.js'
import ApiKeyIssue from '../../../commands/api-key/issue.js'
import ApiKeyList from '../../../commands/api-key/list.js'
import ApiKeyRevoke from '../../../commands/api-key/revoke.js'
import ApiKeyRotate from '../../../commands/api-key/rotate.js'
import UserCreate from '../../../commands/user/create.js'
import UserGrantAdmin from '../../../commands/user/grant-admin.js'
import UserList from '../../../commands/user/list.js'
import UserRevokeAdmin from '../../../commands/user/revoke-admin.js'

const COMMANDS = { Login, Logout, Whoami, ApiKeyCreate, ApiKeyDelete, ApiKeyIssue, ApiKeyList, ApiKeyRevoke, ApiKeyRotate, UserCreate, UserGrantAdmin, UserList, UserRevokeAdmin }

describe('user, api-key, login and whoami commands', () => {
  it.each(Object.entries(COMMANDS))('%s has --json, a summary and examples', (_name, command) => {
    expect(command.enableJsonFlag).toBe(true)
    expect(command.summary).toBeTruthy()
    expect(command.examples?.length).toBeGreaterThan(0)
  })

  it('destructive key commands offer --yes; only login takes a key, and not as the only way', () => {
    for (const command of [ApiKeyRotate, ApiKeyRevoke, ApiKeyDelete]) expect(Object.keys(command.flags)).toContain('yes')
    for (const command of [Whoami, ApiKeyCreate, ApiKeyList, ApiKeyRotate, ApiKeyRevoke, ApiKeyDelete]) expect(Object.keys(command.flags)).not.toContain('api-key')
    expect(Object.keys(Login.flags)).toEqual(expect.arrayContaining(['api-key', 'with-key-stdin', 'api-url']))
  })
})

const commandsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../commands')
const everyCommand = fs
  .readdirSync(commandsDir, { recursive: true, encoding: 'utf8' })
  .filter((file) => file.endsWith('.ts'))
  .map((file) => file.replace(/\.ts$/, ''))
  .sort()

describe('every command', () => {
  it.each(everyCommand)('%s has --json, a summary and examples', async (file) => {
    const command = ((await import(path.join(commandsDir, `${file}.ts`))) as { default: { enableJsonFlag?: boolean; summary?: string; examples?: unknown[] } }).default
    expect(command.enableJsonFlag).toBe(true)
    expect(command.summary).toBeTruthy()
    expect(command.examples?.length).toBeGreaterThan(0)
  })

  it('is listed in docs/cli.md', () => {
    const doc = fs.readFileSync(path.resolve(commandsDir, '../docs/cli.md'), 'utf8')
    for (const file of everyCommand) expect(doc, file).toContain(`nodeplane ${file.split(path.sep).join(' ')}`)
  })
})

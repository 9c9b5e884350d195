/**
 * AGENT_REQUIRE_SIGNED_ARTIFACTS as the node agent reads it, through the built binary: requiring
 * signatures without a release public key to verify them stops the agent (exit 78) before it
 * touches its state directory, and a value that is not a boolean is refused naming the variable.
 */
import fs from 'node:fs'
import path from 'node:path'
import { expect, it } from 'vitest'
import { nodeplane, tempDir } from '../helpers/cli.js'

function agentEnv(dir: string): Record<string, string> {
  fs.writeFileSync(path.join(dir, 'ca.pem'), 'not used')
  fs.writeFileSync(path.join(dir, 'token'), 'npt_not-used', { mode: 0o600 })
  return {
    AGENT_GATEWAY_URL: '127.0.0.1:9',
    AGENT_GATEWAY_CA_FILE: path.join(dir, 'ca.pem'),
    NODE_AGENT_NODE_ID: '0190f5c2-0000-7000-8000-000000000000',
    NODE_AGENT_TOKEN_FILE: path.join(dir, 'token'),
    NODE_AGENT_STATE_DIR: path.join(dir, 'state'),
  }
}

it('node-agent requiring signed artifacts without release public keys, or with a non-boolean, exits 78 naming the variable', { timeout: 60_000 }, async () => {
  const dir = tempDir()
  const [noKeys, notBoolean] = await Promise.all([
    nodeplane(['daemon', 'node-agent'], { env: { ...agentEnv(dir), AGENT_REQUIRE_SIGNED_ARTIFACTS: 'true' } }),
    nodeplane(['daemon', 'node-agent'], { env: { ...agentEnv(dir), AGENT_REQUIRE_SIGNED_ARTIFACTS: 'maybe' } }),
  ])
  expect(noKeys.exitCode).toBe(78)
  expect(noKeys.stderr).toContain('AGENT_REQUIRE_SIGNED_ARTIFACTS=true: no release public key to verify a signature with; set ARTIFACT_RELEASE_PUBLIC_KEYS')
  expect(fs.existsSync(path.join(dir, 'state'))).toBe(false)
  expect(notBoolean.exitCode).toBe(78)
  expect(notBoolean.stderr).toContain('AGENT_REQUIRE_SIGNED_ARTIFACTS="maybe": must be true or false')
  fs.rmSync(dir, { recursive: true, force: true })
})

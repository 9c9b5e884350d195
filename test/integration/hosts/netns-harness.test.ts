/** The test-host harness itself (test/helpers/netns.ts): a stale link of a killed run removed, one namespace with sshd reached with ssh2, then gone without a trace. */
import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import { Client } from 'ssh2'
import { afterAll, describe, expect, it } from 'vitest'
import { sshFingerprint } from '../../../src/hosts/ssh-pool.js'
import { listTestNamespaces, startNetnsHost, type NetnsHost } from '../../helpers/netns.js'

let host: NetnsHost | undefined
afterAll(async () => host?.stop())

function sshRun(h: NetnsHost, command: string): Promise<{ out: string; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const client = new Client()
    let fingerprint = ''
    client
      .on('ready', () => {
        client.exec(command, (err, stream) => {
          if (err) return reject(err)
          let out = ''
          stream.on('data', (d: Buffer) => (out += d.toString()))
          stream.stderr.on('data', () => undefined)
          stream.on('close', () => {
            client.end()
            resolve({ out, fingerprint })
          })
        })
      })
      .on('error', reject)
      .connect({ host: h.address, port: h.port, username: h.user, privateKey: h.privateKey, readyTimeout: 10_000, hostVerifier: (key: Buffer) => ((fingerprint = sshFingerprint(key)), true) })
  })
}

describe('netns test hosts', () => {
  it('runs sshd in its own namespace on its own address, reachable by key, and leaves nothing behind', async () => {
    // What a run killed mid-setup leaves: a veth pair of the harness's naming without its namespace.
    const stale = `np${crypto.randomBytes(3).toString('hex')}`
    execFileSync('ip', ['link', 'add', `${stale}r`, 'type', 'veth', 'peer', 'name', `${stale}h`])
    host = await startNetnsHost()
    expect(execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' })).not.toContain(stale)
    expect(await listTestNamespaces()).toContain(host.namespace)
    const { out, fingerprint } = await sshRun(host, 'ip -o -4 addr show; readlink /proc/self/ns/net')
    expect(fingerprint).toBe(host.hostKeyFingerprint)
    // The shell runs inside the namespace: it sees the host's address, and a network namespace other than ours.
    expect(out).toContain(`inet ${host.address}/24`)
    expect(out).not.toContain(`inet ${host.gatewayAddress}/`)
    expect(out).not.toContain(fs.readlinkSync('/proc/self/ns/net'))

    const { namespace, dir } = host
    await host.stop()
    host = undefined
    expect(await listTestNamespaces()).not.toContain(namespace)
    expect(execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' })).not.toContain(namespace.split('-')[2] ?? namespace)
    expect(fs.existsSync(dir)).toBe(false)
    expect(fs.existsSync(`/etc/netns/${namespace}`)).toBe(false)
  })

  it('gives hosts started at the same moment subnets of their own, each reached on its own sshd', async () => {
    // Started together, as the fleet journeys' hosts are in two processes: each looks for a free
    // subnet before any has added its address.
    const hosts = await Promise.all(Array.from({ length: 6 }, () => startNetnsHost()))
    try {
      expect(new Set(hosts.map((h) => h.gatewayAddress.split('.')[2])).size).toBe(hosts.length)
      const seen = await Promise.all(hosts.map((h) => sshRun(h, 'true')))
      expect(seen.map((r) => r.fingerprint)).toEqual(hosts.map((h) => h.hostKeyFingerprint))
    } finally {
      await Promise.all(hosts.map((h) => h.stop()))
    }
  })
})

/**
 * Test hosts as Linux network namespaces (docs/development.md, "Test hosts in network
 * namespaces"): each host is a namespace `np-<pid>-<random>` joined to the root namespace by a
 * veth pair on a /24 of its own in 10.213.0.0/16 (root side .1, host side .2), running Debian's
 * `sshd` on its own address with its own host key, config, authorized key and root directory.
 * Namespaces share the filesystem, so the host's `node` is this machine's; root's home inside
 * the namespace is the host's own directory (an /etc/netns/<name>/passwd).
 *
 * Traffic goes only to the addresses made here. Teardown kills every process in the namespace
 * (`ip netns pids`) and deletes it, which deletes the veth pair with it; it runs from `stop()`
 * (afterAll), from a process 'exit' handler as a safety net, and every `startNetnsHost`
 * removes namespaces left by a crashed earlier run (a `np-<pid>-*` whose pid is gone;
 * namespaces of live test processes are left alone).
 *
 * Needs root, `ip` (iproute2) and `/usr/sbin/sshd` (openssh-server): without them it throws
 * saying what is missing (scripts/ensure-test-deps.sh installs them).
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const PREFIX = 'np-'
const SSHD = '/usr/sbin/sshd'
const SUBNET = '10.213'

export interface NetnsHost {
  /** The namespace's name (`np-<pid>-<random>`). */
  readonly namespace: string
  /** The host's address inside the namespace, where sshd listens. */
  readonly address: string
  /** The root namespace's end of the link: what the host reaches the control plane on. */
  readonly gatewayAddress: string
  readonly port: number
  readonly user: 'root'
  /** A private key (OpenSSH format) in `authorized_keys`; `keyFile` holds it (0600). */
  readonly privateKey: string
  readonly keyFile: string
  /** The sshd host key's fingerprint as OpenSSH prints it (`SHA256:…`). */
  readonly hostKeyFingerprint: string
  /** The host's root directory for node data. */
  readonly rootDir: string
  /** The temp directory holding config, keys and the root directory. */
  readonly dir: string
  /** Cuts the link (`ip link set … down`) or brings it back. */
  setLinkUp(up: boolean): Promise<void>
  /** Replaces sshd's host key with a new one and restarts sshd (a "changed host key"). */
  rotateHostKey(): Promise<string>
  /** Kills every process in the namespace and deletes it; idempotent. */
  stop(): Promise<void>
}

const live = new Set<string>()
let exitHookInstalled = false

/** Why this machine cannot run netns hosts, or undefined when it can. */
export function netnsUnavailable(): string | undefined {
  const missing: string[] = []
  if (process.getuid?.() !== 0) missing.push('root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)')
  if (!hasIp()) missing.push('`ip` from iproute2')
  if (!fs.existsSync(SSHD)) missing.push(`${SSHD} from openssh-server`)
  if (!fs.existsSync('/usr/bin/ssh-keygen')) missing.push('/usr/bin/ssh-keygen from openssh-client')
  if (missing.length === 0) return undefined
  return `the host fleet's tests run sshd in Linux network namespaces and need: ${missing.join(', ')}; run scripts/ensure-test-deps.sh as root`
}

function hasIp(): boolean {
  return ['/usr/sbin/ip', '/sbin/ip', '/usr/bin/ip', '/bin/ip'].some((p) => fs.existsSync(p))
}

async function ip(...args: string[]): Promise<string> {
  return (await run('ip', args)).stdout
}

async function sshKeygen(file: string): Promise<void> {
  await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'nodeplane-test', '-f', file])
}

/** OpenSSH's `SHA256:<base64 without padding>` of a public key file's blob. */
export function fingerprintOfPublicKeyFile(file: string): string {
  const blob = Buffer.from(fs.readFileSync(file, 'utf8').trim().split(/\s+/)[1] ?? '', 'base64')
  return `SHA256:${crypto.createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`
}

function namespacePids(namespace: string): number[] {
  try {
    return execFileSync('ip', ['netns', 'pids', namespace], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
  } catch {
    return []
  }
}

/** Synchronous, so the 'exit' handler can run it. */
function destroyNamespace(namespace: string): void {
  for (const pid of namespacePids(namespace)) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  try {
    execFileSync('ip', ['netns', 'delete', namespace], { stdio: 'ignore' })
  } catch {
    // already gone
  }
  fs.rmSync(path.join('/etc/netns', namespace), { recursive: true, force: true })
  live.delete(namespace)
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** The namespaces this harness made, of any process (what `ip netns list` shows with our prefix). */
export async function listTestNamespaces(): Promise<string[]> {
  return (await ip('netns', 'list'))
    .split('\n')
    .map((line) => line.split(/\s+/)[0] ?? '')
    .filter((name) => name.startsWith(PREFIX))
}

async function cleanLeftovers(): Promise<void> {
  for (const name of await listTestNamespaces()) {
    const owner = Number(name.split('-')[1])
    if (Number.isInteger(owner) && owner !== process.pid && !pidAlive(owner)) destroyNamespace(name)
  }
  // A run killed between creating the veth pair and moving one end into its namespace leaves both
  // ends here. Namespaces are made before their links, so a link whose namespace is gone is stale.
  const tags = new Set((await listTestNamespaces()).map((name) => name.split('-')[2]))
  for (const match of (await ip('-o', 'link', 'show')).matchAll(/^\d+: (np([0-9a-f]{6})[rh])[@:]/gm)) {
    if (!tags.has(match[2])) await ip('link', 'delete', match[1] as string).catch(() => undefined)
  }
}

/** How many addresses of each 10.213.X.0/24 the root namespace holds. */
async function subnetsInUse(): Promise<Map<number, number>> {
  const used = new Map<number, number>()
  for (const match of (await ip('-o', '-4', 'addr', 'show')).matchAll(/inet 10\.213\.(\d+)\./g)) used.set(Number(match[1]), (used.get(Number(match[1])) ?? 0) + 1)
  return used
}

/**
 * Creates the veth pair and gives the root end a free 10.213.X.1/24; returns X. Test processes
 * running side by side (the fleet journeys) can pick the same X between looking and adding: the
 * same /24 on two links routes to one of them and the other host is unreachable. So the choice is
 * checked after the address is added, and every process that sees its X twice tries another.
 */
async function claimSubnet(rootLink: string, hostLink: string, namespace: string): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt += 1) {
    const used = await subnetsInUse()
    const free = Array.from({ length: 254 }, (_, i) => i + 1).filter((x) => !used.has(x))
    const octet = free[crypto.randomInt(free.length)]
    if (octet === undefined) break
    await ip('link', 'add', rootLink, 'type', 'veth', 'peer', 'name', hostLink)
    await ip('addr', 'add', `${SUBNET}.${octet}.1/24`, 'dev', rootLink)
    if ((await subnetsInUse()).get(octet) === 1) {
      await ip('link', 'set', hostLink, 'netns', namespace)
      return octet
    }
    // Deleting one end of a veth pair deletes both.
    await ip('link', 'delete', rootLink)
    await new Promise((resolve) => setTimeout(resolve, crypto.randomInt(10, 100)))
  }
  throw new Error(`no free ${SUBNET}.X.0/24 for a test host`)
}

function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const namespace of [...live]) destroyNamespace(namespace)
  })
}

function sshdConfig(dir: string, address: string, port: number): string {
  return [
    `ListenAddress ${address}:${port}`,
    `HostKey ${path.join(dir, 'ssh_host_ed25519_key')}`,
    `PidFile ${path.join(dir, 'sshd.pid')}`,
    `AuthorizedKeysFile ${path.join(dir, 'authorized_keys')}`,
    'PermitRootLogin prohibit-password',
    'PubkeyAuthentication yes',
    'PasswordAuthentication no',
    'KbdInteractiveAuthentication no',
    'UsePAM no',
    'UseDNS no',
    // The temp directory is not root-only all the way up; the keys in it are.
    'StrictModes no',
    'PrintMotd no',
    'Subsystem sftp internal-sftp',
    '',
  ].join('\n')
}

async function waitForPort(address: string, port: number, timeoutMs: number, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`sshd exited with ${child.exitCode}: ${log()}`)
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ host: address, port })
      socket.once('connect', () => {
        socket.destroy()
        resolve(true)
      })
      socket.once('error', () => resolve(false))
    })
    if (open) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`sshd on ${address}:${port} did not accept connections within ${timeoutMs} ms: ${log()}`)
}

/** Creates one namespace with its link and a running sshd. */
export async function startNetnsHost(): Promise<NetnsHost> {
  const unavailable = netnsUnavailable()
  if (unavailable) throw new Error(`cannot start a test host: ${unavailable}`)
  installExitHook()
  // At every start, not once per process: a test worker runs many files. Safe while others run:
  // only namespaces of dead processes go, and a namespace exists before its links.
  await cleanLeftovers()

  const tag = crypto.randomBytes(3).toString('hex')
  const namespace = `${PREFIX}${process.pid}-${tag}`
  // Interface names are at most 15 characters.
  const rootLink = `np${tag}r`
  const hostLink = `np${tag}h`
  const port = 22

  let gatewayAddress = ''
  let address = ''
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `nodeplane-netns-${tag}-`))
  let sshd: ChildProcess | undefined
  const stderr: string[] = []
  live.add(namespace)
  try {
    await ip('netns', 'add', namespace)
    const octet = await claimSubnet(rootLink, hostLink, namespace)
    gatewayAddress = `${SUBNET}.${octet}.1`
    address = `${SUBNET}.${octet}.2`
    await ip('link', 'set', rootLink, 'up')
    await ip('-n', namespace, 'addr', 'add', `${address}/24`, 'dev', hostLink)
    await ip('-n', namespace, 'link', 'set', hostLink, 'up')
    await ip('-n', namespace, 'link', 'set', 'lo', 'up')

    // `ip netns exec` binds /etc/netns/<name>/* over /etc: inside the namespace root's home is
    // the host's own, so the machine's dotfiles (a slow .bashrc) never run in a test session.
    const home = path.join(dir, 'home')
    fs.mkdirSync(home, { mode: 0o700 })
    fs.mkdirSync(path.join('/etc/netns', namespace), { recursive: true })
    const passwd = fs.readFileSync('/etc/passwd', 'utf8').replace(/^root:([^:]*):0:0:([^:]*):[^:]*:/m, `root:$1:0:0:$2:${home}:`)
    fs.writeFileSync(path.join('/etc/netns', namespace, 'passwd'), passwd)

    const rootDir = path.join(dir, 'root')
    fs.mkdirSync(rootDir, { mode: 0o755 })
    const keyFile = path.join(dir, 'client_key')
    await Promise.all([sshKeygen(path.join(dir, 'ssh_host_ed25519_key')), sshKeygen(keyFile)])
    fs.copyFileSync(`${keyFile}.pub`, path.join(dir, 'authorized_keys'))
    fs.writeFileSync(path.join(dir, 'sshd_config'), sshdConfig(dir, address, port))
    // Debian's sshd wants its privilege separation directory.
    fs.mkdirSync('/run/sshd', { recursive: true, mode: 0o755 })

    const startSshd = async (): Promise<void> => {
      const child = spawn('ip', ['netns', 'exec', namespace, SSHD, '-D', '-e', '-f', path.join(dir, 'sshd_config')], { stdio: ['ignore', 'ignore', 'pipe'] })
      child.stderr?.on('data', (chunk: Buffer) => {
        stderr.push(chunk.toString('utf8'))
        if (stderr.length > 50) stderr.shift()
      })
      sshd = child
      await waitForPort(address, port, 10_000, child, () => stderr.join('').trim())
    }
    await startSshd()

    let stopped = false
    const host: NetnsHost = {
      namespace,
      address,
      gatewayAddress,
      port,
      user: 'root',
      privateKey: fs.readFileSync(keyFile, 'utf8'),
      keyFile,
      hostKeyFingerprint: fingerprintOfPublicKeyFile(path.join(dir, 'ssh_host_ed25519_key.pub')),
      rootDir,
      dir,
      async setLinkUp(up) {
        await ip('link', 'set', rootLink, up ? 'up' : 'down')
      },
      async rotateHostKey() {
        const old = sshd
        if (old && old.exitCode === null && old.signalCode === null) {
          const exited = new Promise((r) => old.once('exit', r))
          old.kill('SIGTERM')
          await exited
        }
        for (const suffix of ['', '.pub']) fs.rmSync(path.join(dir, `ssh_host_ed25519_key${suffix}`), { force: true })
        await sshKeygen(path.join(dir, 'ssh_host_ed25519_key'))
        await startSshd()
        return fingerprintOfPublicKeyFile(path.join(dir, 'ssh_host_ed25519_key.pub'))
      },
      async stop() {
        if (stopped) return
        stopped = true
        destroyNamespace(namespace)
        // The root end goes with its peer; delete it anyway in case the namespace was already gone.
        await ip('link', 'delete', rootLink).catch(() => undefined)
        fs.rmSync(dir, { recursive: true, force: true })
      },
    }
    return host
  } catch (err) {
    destroyNamespace(namespace)
    await ip('link', 'delete', rootLink).catch(() => undefined)
    fs.rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

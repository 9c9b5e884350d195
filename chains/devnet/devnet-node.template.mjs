// devnet-node: a tiny local chain that nodeplane ships so the whole node lifecycle (configure,
// start, probe, backup, restore, upgrade) can run against a real process on one machine.
// Only Node.js builtins: a release is installed alone on a host.
import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { parseArgs } from 'node:util'

const VERSION = '__DEVNET_NODE_VERSION__'
const CLIENT_VERSION = `devnet-node/v${VERSION}`

function versionAtLeast(wanted) {
  const have = VERSION.split('.').map(Number)
  const want = wanted.split('.').map(Number)
  for (let i = 0; i < want.length; i++) {
    if ((have[i] ?? 0) !== want[i]) return (have[i] ?? 0) > want[i]
  }
  return true
}

const log = (line) => process.stdout.write(`${new Date().toISOString()} ${line}\n`)

function fail(message, code = 2) {
  process.stderr.write(`devnet-node: ${message}\n`)
  process.exit(code)
}

const CONFIG_KEYS = ['rpc_port', 'rpc_host', 'block_time_ms', 'sync_blocks', 'peers', 'chain_id', 'archive', 'crash_after_ms', 'halt_blocks']

function readConfig(file) {
  let raw
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    fail(`cannot read config ${file}: ${err.message}`)
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail(`config ${file} must be a JSON object`)
  const int = (key, fallback, min, max) => {
    const value = raw[key] ?? fallback
    if (!Number.isInteger(value) || value < min || value > max) fail(`config ${key} must be a whole number from ${min} to ${max}`)
    return value
  }
  const bool = (key) => {
    const value = raw[key] ?? false
    if (typeof value !== 'boolean') fail(`config ${key} must be true or false`)
    return value
  }
  if (raw.rpc_port === undefined) fail('config rpc_port is required')
  for (const key of Object.keys(raw)) if (!CONFIG_KEYS.includes(key)) log(`ignoring unknown config key ${key}`)
  const host = raw.rpc_host ?? '127.0.0.1'
  if (typeof host !== 'string' || host.length === 0) fail('config rpc_host must be a host name or address')
  return {
    rpc_port: int('rpc_port', undefined, 0, 65_535),
    rpc_host: host,
    block_time_ms: int('block_time_ms', 1_000, 1, 3_600_000),
    sync_blocks: int('sync_blocks', 0, 0, 1_000_000_000),
    peers: int('peers', 3, 0, 10_000),
    chain_id: int('chain_id', 1_337, 1, 2 ** 31 - 1),
    archive: bool('archive'),
    crash_after_ms: raw.crash_after_ms === undefined ? undefined : int('crash_after_ms', undefined, 0, 2 ** 31 - 1),
    halt_blocks: bool('halt_blocks'),
  }
}

function writeAtomically(file, content, mode) {
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, content, { mode })
  fs.renameSync(tmp, file)
}

function loadHeight(file) {
  if (!fs.existsSync(file)) return 0
  try {
    const height = JSON.parse(fs.readFileSync(file, 'utf8')).height
    if (Number.isInteger(height) && height >= 0) return height
  } catch {
    // fall through: a damaged state file must stop the node, not silently restart the chain
  }
  fail(`chain state ${file} is damaged; restore a backup or remove it to start a new chain`, 1)
}

/** The node key is created once and then kept: it is the node's identity across restarts. */
function ensureNodeKey(file) {
  try {
    fs.writeFileSync(file, `${crypto.randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' })
    log(`generated node key ${file}`)
  } catch (err) {
    if (err.code !== 'EEXIST') throw err
  }
}

const { values } = (() => {
  try {
    return parseArgs({
      options: { config: { type: 'string' }, 'data-dir': { type: 'string' }, version: { type: 'boolean' } },
      strict: true,
    })
  } catch (err) {
    fail(`${err.message}\nusage: devnet-node --config <file.json> --data-dir <dir> | --version`)
  }
})()

if (values.version) {
  process.stdout.write(`${VERSION}\n`)
  process.exit(0)
}
if (!values.config || !values['data-dir']) fail('usage: devnet-node --config <file.json> --data-dir <dir> | --version')

const config = readConfig(values.config)
const dataDir = path.resolve(values['data-dir'])
fs.mkdirSync(dataDir, { recursive: true })
const stateFile = path.join(dataDir, 'chain.json')
ensureNodeKey(path.join(dataDir, 'nodekey'))

let height = loadHeight(stateFile)
const startingBlock = height
const highestBlock = startingBlock + config.sync_blocks
let syncing = config.sync_blocks > 0

function persist() {
  writeAtomically(stateFile, `${JSON.stringify({ height, written_by: CLIENT_VERSION, archive: config.archive })}\n`, 0o644)
}
persist()

const hex = (n) => `0x${n.toString(16)}`

const methods = {
  web3_clientVersion: () => CLIENT_VERSION,
  eth_chainId: () => hex(config.chain_id),
  net_version: () => String(config.chain_id),
  eth_blockNumber: () => hex(height),
  net_peerCount: () => hex(config.peers),
  eth_syncing: () => (syncing ? { startingBlock: hex(startingBlock), currentBlock: hex(height), highestBlock: hex(highestBlock) } : false),
}
if (versionAtLeast('1.1.0')) methods.eth_gasPrice = () => hex(1_000_000_000)

const rpcError = (id, code, message) => ({ jsonrpc: '2.0', id, error: { code, message } })

function answer(request) {
  if (typeof request !== 'object' || request === null || Array.isArray(request) || typeof request.method !== 'string') {
    return rpcError(request?.id ?? null, -32600, 'Invalid Request')
  }
  const isNotification = !('id' in request)
  const method = Object.hasOwn(methods, request.method) ? methods[request.method] : undefined
  const response = method
    ? { jsonrpc: '2.0', id: request.id, result: method() }
    : rpcError(request.id ?? null, -32601, `the method ${request.method} does not exist/is not available`)
  return isNotification ? undefined : response
}

function handle(body) {
  let parsed
  try {
    parsed = JSON.parse(body)
  } catch {
    return rpcError(null, -32700, 'Parse error')
  }
  if (!Array.isArray(parsed)) return answer(parsed)
  if (parsed.length === 0) return rpcError(null, -32600, 'Invalid Request')
  const responses = parsed.map(answer).filter((r) => r !== undefined)
  return responses.length > 0 ? responses : undefined
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST', 'content-type': 'text/plain' }).end('devnet-node answers JSON-RPC over POST\n')
    return
  }
  const chunks = []
  let size = 0
  req.on('data', (chunk) => {
    size += chunk.length
    if (size > 1_048_576) {
      res.writeHead(413).end()
      req.destroy()
      return
    }
    chunks.push(chunk)
  })
  req.on('end', () => {
    if (res.headersSent) return
    const reply = handle(Buffer.concat(chunks).toString('utf8'))
    if (reply === undefined) {
      res.writeHead(204).end()
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply))
  })
})

function produceBlock() {
  height += 1
  persist()
  if (syncing && height >= highestBlock) {
    syncing = false
    log(`synced at block ${height}`)
  } else if (height % 100 === 0) {
    log(`block ${height}`)
  }
}

let blockTimer
let stopping = false

function shutdown(signal) {
  if (stopping) return
  stopping = true
  log(`received ${signal}, stopping at block ${height}`)
  clearInterval(blockTimer)
  persist()
  server.close(() => process.exit(0))
  server.closeAllConnections()
}

server.on('error', (err) => fail(`cannot serve JSON-RPC on ${config.rpc_host}:${config.rpc_port}: ${err.message}`, 1))
server.listen(config.rpc_port, config.rpc_host, () => {
  const address = server.address()
  log(`${CLIENT_VERSION} chain ${config.chain_id} ${config.archive ? 'archive' : 'full'} node, data ${dataDir}, block ${height}`)
  log(`JSON-RPC listening on ${config.rpc_host}:${address.port}`)
  if (syncing) log(`syncing ${config.sync_blocks} blocks to ${highestBlock}`)
  if (config.halt_blocks) log('block production halted (halt_blocks)')
  else blockTimer = setInterval(produceBlock, config.block_time_ms)
})

process.on('SIGTERM', () => shutdown('SIGTERM'))
process.on('SIGINT', () => shutdown('SIGINT'))

if (config.crash_after_ms !== undefined) {
  setTimeout(() => {
    persist()
    process.stderr.write(`devnet-node: crashing after ${config.crash_after_ms} ms (crash_after_ms)\n`)
    process.exit(1)
  }, config.crash_after_ms).unref()
}

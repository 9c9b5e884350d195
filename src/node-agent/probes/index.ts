import type { ProbeSpec } from '../../agent-gateway/protocol.js'
import { createBitcoinProbe } from './bitcoin-rpc.js'
import { createCommandProbe, type CommandProbeOptions } from './command.js'
import { createEthereumProbe, type EthereumProbeOptions } from './ethereum-jsonrpc.js'
import type { Probe } from './types.js'

export type { Probe, ProbeReport, ReportedSyncStatus } from './types.js'
export type ProbeOptions = CommandProbeOptions & EthereumProbeOptions

export function createProbe(spec: ProbeSpec, opts: ProbeOptions): Probe {
  switch (spec.type) {
    case 'ethereum_jsonrpc':
      return createEthereumProbe(spec, opts)
    case 'command':
      return createCommandProbe(spec, opts)
    case 'bitcoin_rpc':
      return createBitcoinProbe(spec, opts)
  }
}

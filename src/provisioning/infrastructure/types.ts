/**
 * What the provisioning workflows need from an infrastructure provider (ARCHITECTURE.md:
 * `src/provisioning/infrastructure`). See docs/infrastructure.md for the contract a cloud adapter
 * must honour: idempotent creation by host key, destroy of a missing host succeeds, and the
 * agent started on the host dials the gateway with the node's token.
 */
export interface AgentBootstrap {
  /** host:port of the agent-gateway */
  gatewayTarget: string
  /** PEM of the CA that signed the gateway certificate */
  caPem: string
  /** Name to check the gateway certificate against, when it differs from the dialled host. */
  serverName?: string
  /** The node token: written to the host only, mode 0600, never logged. */
  token: string
}

export interface HostSpec {
  nodeId: string
  /**
   * Names the host idempotently: creating again with the same key returns the same host
   * (a workflow step retried after a crash must not make a second machine).
   */
  hostKey: string
  chainProfileId: string
  nodeType: string
  region: string
  instanceType: string
  agent: AgentBootstrap
}

export interface Host {
  host_id: string
  host_ip: string
  provider: string
  instance_type: string
  region: string
}

export type HostStatus = 'running' | 'stopped' | 'missing'

export interface InfrastructureProvider {
  readonly name: string
  createHost(spec: HostSpec): Promise<Host>
  /** Succeeds for a host that is already gone. */
  destroyHost(hostId: string): Promise<void>
  hostStatus(hostId: string): Promise<HostStatus>
}

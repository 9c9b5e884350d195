export type { AgentBootstrap, Host, HostSpec, HostStatus, InfrastructureProvider } from './types.js'
export { LocalInfrastructureProvider, type LocalProviderOptions } from './local.js'
export { NoHostCapacityError, SshInfrastructureProvider, type SshProviderOptions } from './ssh.js'

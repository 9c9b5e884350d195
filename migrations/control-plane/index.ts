import type { Migration } from '../../src/db/migrate.js'
import * as initialSchema from './0001_initial_schema.js'
import * as authServer from './0002_auth_server.js'
import * as agents from './0003_agents.js'
import * as nodeKeys from './0004_node_keys.js'
import * as payments from './0005_payments.js'
import * as healthEvaluation from './0006_health_evaluation.js'
import * as incidents from './0007_incidents.js'
import * as uptime from './0008_uptime.js'
import * as rollouts from './0009_rollouts.js'
import * as provisionRetries from './0010_provision_retries.js'
import * as artifacts from './0011_artifacts.js'
import * as agentChainPid from './0012_agent_chain_pid.js'
import * as agentGatewayPresence from './0013_agent_gateway_presence.js'

/** In order; a released migration is never edited, a change is a new entry. */
export const controlPlaneMigrations: readonly Migration[] = [initialSchema, authServer, agents, nodeKeys, payments, healthEvaluation, incidents, uptime, rollouts, provisionRetries, artifacts, agentChainPid, agentGatewayPresence]

import { describe, expect, it } from 'vitest'
import {
  APPLICATION_HEALTH_VALUES,
  NODE_STATES,
  NODE_TRANSITIONS,
  SYNC_STATUSES,
  canTransition,
  displayState,
  type NodeState,
} from '../../../src/nodes/states.js'

describe('node transition table', () => {
  it('is exactly the spec table', () => {
    expect(NODE_TRANSITIONS).toEqual({
      provisioning: ['syncing', 'terminating', 'failed'],
      syncing: ['healthy', 'degraded', 'down', 'terminating'],
      healthy: ['degraded', 'down', 'maintenance', 'terminating'],
      degraded: ['healthy', 'down', 'maintenance', 'terminating'],
      down: ['syncing', 'healthy', 'maintenance', 'terminating'],
      maintenance: ['syncing', 'healthy', 'terminating'],
      terminating: ['terminated', 'failed'],
      terminated: [],
      failed: [],
    })
  })

  it('rejects every move outside the table, including leaving a terminal state', () => {
    let allowed = 0
    for (const from of NODE_STATES) {
      for (const to of NODE_STATES) {
        expect(canTransition(from, to)).toBe(NODE_TRANSITIONS[from].includes(to))
        if (canTransition(from, to)) allowed++
      }
    }
    expect(allowed).toBe(24)
    expect(canTransition('terminated', 'provisioning')).toBe(false)
    expect(canTransition('failed', 'syncing')).toBe(false)
  })
})

describe('display state', () => {
  const shownAsThemselves: NodeState[] = ['provisioning', 'down', 'maintenance', 'terminating', 'terminated', 'failed']

  it('shows infrastructure states that outrank health as themselves', () => {
    for (const state of shownAsThemselves) {
      for (const application_health of APPLICATION_HEALTH_VALUES) {
        for (const sync_status of SYNC_STATUSES) {
          expect(displayState({ state, application_health, sync_status })).toBe(state)
        }
      }
    }
  })

  it('then application health, then sync status, then the state', () => {
    expect(displayState({ state: 'healthy', application_health: 'critical', sync_status: 'stalled' })).toBe('critical')
    expect(displayState({ state: 'syncing', application_health: 'degraded', sync_status: 'syncing' })).toBe('degraded')
    expect(displayState({ state: 'healthy', application_health: 'ok', sync_status: 'syncing' })).toBe('syncing')
    expect(displayState({ state: 'degraded', application_health: 'unknown', sync_status: 'stalled' })).toBe('stalled')
    expect(displayState({ state: 'healthy', application_health: 'ok', sync_status: 'synced' })).toBe('healthy')
    expect(displayState({ state: 'degraded', application_health: 'ok', sync_status: 'synced' })).toBe('degraded')
    expect(displayState({ state: 'syncing', application_health: 'unknown', sync_status: 'unknown' })).toBe('syncing')
  })
})

/**
 * systemd readiness (`Type=notify`, sd_notify(3)): systemd passes a unix datagram socket in
 * NOTIFY_SOCKET and holds back the units ordered `After=` this one until it reads `READY=1`.
 *
 * Node.js has no unix datagram sockets, and the packages that add them (sd-notify, unix-dgram)
 * are native addons. So the datagram goes through systemd's own `systemd-notify`, present
 * wherever systemd is. It sends from its own pid, which is why the units say `NotifyAccess=all`
 * (with `main` systemd would drop it); since systemd 246 it also waits until the manager has
 * read the message (a barrier), so it is not lost by exiting before systemd looked at its
 * sender. Without NOTIFY_SOCKET (not under systemd, or `Type=simple`) nothing is sent.
 */
import { execFile } from 'node:child_process'
import type { Env } from '../config/env.js'
import type { Logger } from '../log.js'

/** Long enough for a loaded manager to take the message; a hung helper never holds a daemon up. */
const NOTIFY_TIMEOUT_MS = 5_000

export type NotifyState = 'READY=1' | 'STOPPING=1'

/** Sends `state` to systemd when NOTIFY_SOCKET is set; failures are logged, never thrown. */
export async function notifySystemd(state: NotifyState, logger: Logger, env: Env = process.env): Promise<boolean> {
  const socket = env.NOTIFY_SOCKET
  if (!socket) return false
  const sent = await new Promise<Error | undefined>((resolve) => {
    execFile('systemd-notify', [state], { env: { PATH: env.PATH ?? '/usr/bin:/bin', NOTIFY_SOCKET: socket }, timeout: NOTIFY_TIMEOUT_MS }, (err) => resolve(err ?? undefined))
  })
  if (sent) {
    logger.error({ state, err: sent.message }, 'could not notify systemd through systemd-notify (is it installed, and is the unit NotifyAccess=all?)')
    return false
  }
  logger.debug({ state }, 'notified systemd')
  return true
}

/** The one "ready" of a daemon: the log line, then `READY=1` to systemd. */
export async function announceReady(logger: Logger, fields: Record<string, unknown>): Promise<void> {
  logger.info(fields, 'ready')
  await notifySystemd('READY=1', logger)
}

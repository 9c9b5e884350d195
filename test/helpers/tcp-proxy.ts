/**
 * A TCP proxy on loopback between agents and a gateway, to cut the network under a live agent
 * (fencing tests). `cut()` stops forwarding without closing anything, as a pulled cable or a
 * firewall dropping packets does: open connections go silent and new ones are accepted but never
 * answered. `restore()` drops what was held (the peers see a reset, as after a long outage) and
 * forwards again.
 */
import net from 'node:net'

export interface TcpProxy {
  /** host:port to dial instead of the target. */
  readonly target: string
  cut(): void
  restore(): void
  readonly isCut: boolean
  close(): Promise<void>
}

export async function startTcpProxy(upstream: string): Promise<TcpProxy> {
  const [upstreamHost, upstreamPort] = [upstream.slice(0, upstream.lastIndexOf(':')), Number(upstream.slice(upstream.lastIndexOf(':') + 1))]
  let cut = false
  const sockets = new Set<net.Socket>()
  const track = (socket: net.Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => undefined)
  }
  const server = net.createServer((client) => {
    track(client)
    // Cut: accepted, then silence (no forwarding, no close).
    if (cut) return
    const server = net.connect(upstreamPort, upstreamHost)
    track(server)
    const forward = (from: net.Socket, to: net.Socket) =>
      from.on('data', (chunk: Buffer) => {
        if (!cut) to.write(chunk)
      })
    forward(client, server)
    forward(server, client)
    client.on('close', () => server.destroy())
    server.on('close', () => client.destroy())
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const port = (server.address() as net.AddressInfo).port
  return {
    target: `127.0.0.1:${port}`,
    get isCut() {
      return cut
    },
    cut() {
      cut = true
    },
    restore() {
      for (const socket of sockets) socket.destroy()
      cut = false
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

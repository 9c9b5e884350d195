import { startNats } from '/work/main/test/helpers/nats.js'
import { startPostgres } from '/work/main/test/helpers/postgres.js'
import { benchEvents } from '/work/main/bench/events.js'
const pg = await startPostgres()
const nats = await startNats()
try {
  const figs = await benchEvents({ postgresUrl: pg.url, natsUrl: nats.url, scale: Number(process.env.BENCH_SCALE ?? 1), log: (l) => process.stderr.write(l + '\n') })
  process.stdout.write(JSON.stringify(figs, null, 2) + '\n')
} finally {
  await nats.destroy()
  await pg.stop()
}

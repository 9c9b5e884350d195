import { it } from 'vitest'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { startNats } from '../../helpers/nats.js'
import { silentLogger } from './support.js'
it('closes', async () => {
  const nats = await startNats()
  const bus = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'x' })
  const t = Date.now()
  await bus.close()
  console.log('closed in', Date.now() - t)
  await nats.destroy()
})

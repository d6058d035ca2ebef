// aedes on 127.0.0.1:<port> with its in-memory persistence (sessions and
// QoS 1 queues live as long as this process): node broker.mjs <port>
import { createServer } from 'node:net'
import { Aedes } from 'aedes'

const port = Number(process.argv[2])
const aedes = await Aedes.createBroker()
const server = createServer(aedes.handle)
server.listen(port, '127.0.0.1', () => console.log(`aedes listening on ${port}`))
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => aedes.close(() => server.close(() => process.exit(0))))
}

// mqtt.js publishes each line of standard input as one QoS 1 message and exits
// once the broker has acknowledged them all:
// node publish.mjs <url> <topic> <protocol version 4|5> <client id>
import { connectAsync } from 'mqtt'
import { createInterface } from 'node:readline'

const [url, topic, version, clientId] = process.argv.slice(2)
const lines = []
for await (const line of createInterface({ input: process.stdin })) {
  if (line) lines.push(line)
}
const client = await connectAsync(url, {
  protocolVersion: Number(version),
  clientId,
  clean: true,
  reconnectPeriod: 0,
})
for (let i = 0; i < lines.length; i += 50) {
  await Promise.all(lines.slice(i, i + 50).map((line) => client.publishAsync(topic, line, { qos: 1 })))
}
await client.endAsync()
console.log(`published ${lines.length}`)

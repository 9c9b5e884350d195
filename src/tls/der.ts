/**
 * The few DER encodings an X.509 certificate needs (ITU-T X.690), for the development PKI. Node
 * signs and parses certificates natively but cannot assemble one; this builds the bytes it signs.
 */
import net from 'node:net'

function tlv(tag: number, content: Buffer): Buffer {
  const length = content.length
  let header: Buffer
  if (length < 0x80) {
    header = Buffer.from([tag, length])
  } else {
    const bytes: number[] = []
    for (let n = length; n > 0; n >>= 8) bytes.unshift(n & 0xff)
    header = Buffer.from([tag, 0x80 | bytes.length, ...bytes])
  }
  return Buffer.concat([header, content])
}

export const sequence = (...items: Buffer[]): Buffer => tlv(0x30, Buffer.concat(items))
export const set = (...items: Buffer[]): Buffer => tlv(0x31, Buffer.concat(items))
export const octetString = (bytes: Buffer): Buffer => tlv(0x04, bytes)
export const utf8String = (text: string): Buffer => tlv(0x0c, Buffer.from(text, 'utf8'))
export const boolean = (value: boolean): Buffer => tlv(0x01, Buffer.from([value ? 0xff : 0x00]))
/** A context-specific, constructed tag wrapping its content ([n] EXPLICIT). */
export const explicit = (n: number, content: Buffer): Buffer => tlv(0xa0 | n, content)
/** A context-specific, primitive tag in place of the content's own ([n] IMPLICIT on a string). */
export const implicit = (n: number, bytes: Buffer): Buffer => tlv(0x80 | n, bytes)

/** An INTEGER from unsigned big-endian bytes: minimal, with a zero byte only to keep it positive. */
export function unsignedInteger(bytes: Buffer): Buffer {
  let start = 0
  while (start < bytes.length - 1 && bytes[start] === 0) start++
  const trimmed = bytes.subarray(start)
  return tlv(0x02, (trimmed[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed)
}

export function smallInteger(value: number): Buffer {
  return unsignedInteger(Buffer.from([value]))
}

/** A BIT STRING of whole bytes (no unused bits). */
export function bitString(bytes: Buffer): Buffer {
  return tlv(0x03, Buffer.concat([Buffer.from([0]), bytes]))
}

/** A named-bit BIT STRING (keyUsage): bit 0 is the most significant bit of the first byte, trailing zero bits dropped. */
export function namedBits(bits: readonly number[]): Buffer {
  const highest = Math.max(...bits)
  const bytes = Buffer.alloc(Math.floor(highest / 8) + 1)
  for (const bit of bits) bytes[bit >> 3] = (bytes[bit >> 3] as number) | (0x80 >> (bit & 7))
  const unused = 7 - (highest & 7)
  return tlv(0x03, Buffer.concat([Buffer.from([unused]), bytes]))
}

export function objectIdentifier(oid: string): Buffer {
  const arcs = oid.split('.').map(Number)
  const out: number[] = [(arcs[0] as number) * 40 + (arcs[1] as number)]
  for (const arc of arcs.slice(2)) {
    const chunk: number[] = []
    let n = arc
    do {
      chunk.unshift(n & 0x7f)
      n = Math.floor(n / 128)
    } while (n > 0)
    for (let i = 0; i < chunk.length - 1; i++) chunk[i] = (chunk[i] as number) | 0x80
    out.push(...chunk)
  }
  return tlv(0x06, Buffer.from(out))
}

/** UTCTime through 2049, GeneralizedTime after, as RFC 5280 section 4.1.2.5 requires. */
export function time(date: Date): Buffer {
  const iso = date.toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z'
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(iso.slice(2), 'ascii')) : tlv(0x18, Buffer.from(iso, 'ascii'))
}

/** An IP address's bytes for a subjectAltName iPAddress: 4 for IPv4, 16 for IPv6. */
export function ipAddressBytes(ip: string): Buffer {
  if (net.isIPv4(ip)) return Buffer.from(ip.split('.').map(Number))
  if (!net.isIPv6(ip) || ip.includes('.')) throw new Error(`not an IP address this PKI can name: ${ip}`)
  const [head = '', tail = ''] = ip.split('::') as [string, string?]
  const groups = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)))
  const front = groups(head)
  const back = ip.includes('::') ? groups(tail) : []
  const all = [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back]
  const bytes = Buffer.alloc(16)
  all.forEach((group, i) => bytes.writeUInt16BE(group, i * 2))
  return bytes
}

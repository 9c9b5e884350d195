/**
 * The `rpc` section of a chain profile (docs/rpc-gateway.md, "Method policy"): which JSON-RPC
 * methods the rpc-gateway refuses for every node of the chain, and per node type what it offers
 * (an allow-list) or refuses besides (e.g. archive-only methods on a full node). Patterns are a
 * method name or a prefix ending in `*` (`debug_*`).
 */
import { z } from 'zod'

export const METHOD_PATTERN = /^[A-Za-z0-9_.]+\*?$|^\*$/

const methodPattern = z.string().max(200).regex(METHOD_PATTERN, 'must be a method name, or a prefix ending in * (e.g. debug_*)')

const denyRule = z
  .object({
    methods: z.array(methodPattern).min(1).max(500),
    /** Told to the caller in the JSON-RPC error's message. */
    reason: z.string().min(1).max(300),
  })
  .strict()

export const rpcPolicySchema = z
  .object({
    deny: z.array(denyRule).max(50).default([]),
    node_types: z
      .record(
        z.string(),
        z
          .object({
            /** Only these pass (after `deny`); absent: every method not denied. */
            allow: z.array(methodPattern).max(2000).optional(),
            deny: z.array(denyRule).max(50).default([]),
          })
          .strict(),
      )
      .default({}),
  })
  .strict()

export type RpcPolicySpec = z.infer<typeof rpcPolicySchema>

/**
 * Subscription terms. Apart from chains.ts (which re-exports them) so that a module needing only
 * the names, such as a CLI command's flag options, does not load the chain catalogue's parsers.
 */

/** Spec: a subscription's duration is one of these. */
export const DURATIONS = ['1w', '2w', '1m', '3m', '6m'] as const
export type SubscriptionDuration = (typeof DURATIONS)[number]

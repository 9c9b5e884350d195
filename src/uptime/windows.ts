/**
 * The uptime windows and granularities the API offers. Apart from reads.ts (which re-exports them)
 * so that the CLI's flag options do not load the readers and the rollup worker behind them.
 */

export const UPTIME_WINDOWS = ['24h', '7d', '30d'] as const
export type UptimeWindow = (typeof UPTIME_WINDOWS)[number]
export const UPTIME_GRANULARITIES = ['hourly', 'daily'] as const
export type UptimeGranularity = (typeof UPTIME_GRANULARITIES)[number]

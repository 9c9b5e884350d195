/**
 * The TTY view of `nodeplane uptime report` (ink): the table, then one coloured bar per day.
 * Written with createElement rather than JSX so the build needs no JSX settings.
 */
import type { ReactElement } from 'react'
import type { UptimeReport } from './uptime-report.js'
import { colourAllowed } from './terminal.js'
import { barText, chartTitle, dailyBars, describeCheck, formatPercentage, renderUptimeTable, type DayBar } from './uptime-report.js'

function barColour(bar: DayBar, min: number): string | undefined {
  // NO_COLOR: ink's chalk does not read it (src/cli/terminal.ts).
  if (!colourAllowed()) return undefined
  if (bar.percentage === null) return 'gray'
  if (bar.percentage >= min) return 'green'
  return bar.percentage >= min - 1 ? 'yellow' : 'red'
}

export async function showUptimeReport(report: UptimeReport, stdout: NodeJS.WriteStream = process.stdout): Promise<void> {
  const { Box, Text, render } = await import('ink')
  // react, like ink, is loaded only here: only a terminal shows this view.
  const { createElement: h } = await import('react')
  const min = report.check?.min ?? 99.9
  const bars = dailyBars(report.nodes)
  const view: ReactElement = h(
    Box,
    { flexDirection: 'column' },
    h(Text, null, renderUptimeTable(report.nodes)),
    h(Text, null, ' '),
    h(Text, { bold: true }, chartTitle(report.nodes)),
    ...bars.map((bar) =>
      bar.until
        ? h(Text, { key: bar.day, dimColor: true }, barText(bar))
        : h(
            Box,
            { key: bar.day },
            h(Text, { dimColor: true }, `${bar.day}  `),
            h(Text, { color: barColour(bar, min) }, '█'.repeat(bar.filled)),
            h(Text, { dimColor: true }, `${'░'.repeat(bar.percentage === null ? bar.width : bar.width - bar.filled)}  `),
            h(Text, { color: barColour(bar, min) }, formatPercentage(bar.percentage)),
          ),
    ),
    ...(report.check ? [h(Text, null, ' '), h(Text, { color: colourAllowed() ? (report.check.below.length > 0 ? 'red' : 'green') : undefined }, describeCheck(report.check))] : []),
  )
  const app = render(view, { stdout, patchConsole: false, exitOnCtrlC: false })
  // ink creates the exit promise on the first waitUntilExit(): ask before unmounting, or it never settles.
  const exited = app.waitUntilExit()
  app.unmount()
  await exited
}

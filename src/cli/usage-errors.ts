/**
 * oclif's parse errors, reworded so that one line names the flag or argument and what it
 * wants. oclif builds them as several lines ("The following error occurred:", "Parsing --limit",
 * a tab-indented reason, "See more help with --help"), of which a one-line error kept only the
 * first, which says nothing.
 */

const NOISE = [/^The following errors? occurred:$/, /^See more help with --help$/, /^Alternatively, you can use "--"/]

// ANSI colour codes (oclif dims the reasons on a terminal).
// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;]*m/g

/** Every reason in an oclif parse error's message, joined into one line. */
export function usageMessage(raw: string): string {
  const lines = raw
    .replace(ANSI, '')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !NOISE.some((n) => n.test(l)))
  const reasons: string[] = []
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string
    const parsing = /^Parsing (--\S+)$/.exec(line)
    if (parsing && lines[i + 1] !== undefined) {
      reasons.push(`${parsing[1]}: ${lines[i + 1]}`)
      i++
      continue
    }
    const missingFlag = /^Missing required flag (\S+)$/.exec(line)
    if (missingFlag) {
      reasons.push(`missing required flag --${missingFlag[1]}`)
      continue
    }
    const missingArgs = /^Missing (\d+) required args?:?$/.exec(line)
    if (missingArgs) {
      // The named arguments follow, one per line: "name  description".
      const names = lines.slice(i + 1).map((l) => l.split(/\s{2,}/)[0]?.toUpperCase() ?? l)
      reasons.push(`missing required argument${names.length === 1 ? '' : 's'} ${names.join(', ')}`)
      break
    }
    if (/^Note: /.test(line)) continue
    reasons.push(line)
  }
  return reasons.join('; ') || raw.trim()
}

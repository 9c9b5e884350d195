/** Walks a cursor-paginated list (`?limit=&cursor=` -> `{items, next_cursor}`). */
import type { ApiClient } from './api-client.js'
import type { Page } from './views.js'

/** The API's largest page (src/http/pagination.ts, MAX_PAGE_SIZE). */
export const PAGE_SIZE = 200

/** Every item, or the first `limit` items; stops on a cursor seen before rather than looping. */
export async function listAll<T>(api: ApiClient, path: string, limit?: number): Promise<T[]> {
  const items: T[] = []
  const seen = new Set<string>()
  let cursor: string | undefined
  for (;;) {
    const want = limit === undefined ? PAGE_SIZE : Math.min(PAGE_SIZE, limit - items.length)
    const page = await api.get<Page<T>>(path, { limit: want, cursor })
    items.push(...page.items)
    if (limit !== undefined && items.length >= limit) return items.slice(0, limit)
    if (!page.next_cursor || seen.has(page.next_cursor) || page.items.length === 0) return items
    seen.add(page.next_cursor)
    cursor = page.next_cursor
  }
}

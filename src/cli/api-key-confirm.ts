/** The confirmation of `api-key rotate|revoke|delete`, naming the key so nobody guesses from an id. */
import type { ApiClient } from './api-client.js'
import { confirmDestructive, isInteractive } from './prompt.js'
import type { ApiKeyItem } from './views.js'

export async function confirmKeyAction(api: ApiClient, id: string, verb: string, consequence: string, yes: boolean): Promise<void> {
  if (yes || !isInteractive()) return
  // Only on a terminal: one more request, so the question names the key (and a wrong id fails here).
  const key = await api.get<ApiKeyItem>(`/api-keys/${encodeURIComponent(id)}`)
  await confirmDestructive(`${verb} API key "${key.name}" (${key.key_prefix}…, ${key.id})? ${consequence}.`, false)
}

/** The confirmation of `api-key rotate|revoke|delete`, naming the key so nobody guesses from an id. */
import type { ApiClient } from './api-client.js'
import { confirmDestructive } from './prompt.js'
import type { ApiKeyItem } from './views.js'

export async function confirmKeyAction(api: ApiClient, id: string, verb: string, consequence: string, yes: boolean, known?: ApiKeyItem): Promise<void> {
  await confirmDestructive(yes, async () => {
    // One more request (unless the caller has the key), so the question names the key (and a wrong id fails here).
    const key = known ?? (await api.get<ApiKeyItem>(`/api-keys/${encodeURIComponent(id)}`))
    return { action: `${verb} API key "${key.name}" (${key.key_prefix}…, ${key.id})`, consequence }
  })
}

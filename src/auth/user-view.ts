/** A user as the admin API answers it and the `user` commands print it (`--json`). */
import type { User } from './users.js'

export interface UserView {
  id: string
  email: string | null
  wallet_address: string | null
  is_admin: boolean
  /** Set by `user disable`: every key and token of the user is refused. */
  disabled_at: string | null
  created_at: string
}

export function toUserView(user: User): UserView {
  return {
    id: user.id,
    email: user.email,
    wallet_address: user.wallet_address,
    is_admin: user.is_admin,
    disabled_at: user.disabled_at?.toISOString() ?? null,
    created_at: user.created_at.toISOString(),
  }
}

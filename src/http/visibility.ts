/**
 * Listings of owned records (nodes, subscriptions): a user sees their own, an admin everyone's and
 * may narrow to one user. A non-admin naming another user is refused (403) rather than answered
 * with an empty list, so a script using a non-admin key by mistake learns it.
 */
import { visibilityFor, type Visibility } from '../auth/scopes.js'
import { ForbiddenError } from '../errors.js'
import type { Principal } from './context.js'

export function callerVisibility(principal: Principal): Visibility {
  return visibilityFor(principal.scopes, principal.userId)
}

/** The visibility and the `user_id` filter of a listing; `what` names the records in the 403. */
export function listingScope(principal: Principal, requestedUserId: string | undefined, what: string): { visibility: Visibility; userId: string | undefined } {
  const visibility = callerVisibility(principal)
  const userId = requestedUserId?.toLowerCase()
  if (visibility.kind === 'owner' && userId !== undefined && userId !== principal.userId) {
    throw new ForbiddenError('forbidden', `query.user_id: listing another user's ${what} needs the scope "admin"`)
  }
  return { visibility, userId }
}

import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { listAll } from '../../src/cli/pages.js'
import type { NotificationView } from '../../src/notifications/notifications.js'

export default class NotificationList extends BaseCommand<typeof NotificationList> {
  static override summary = 'List your notifications (payment failures, subscription expiry and termination), newest first, through the API'
  static override description =
    'Only ever your own notifications, with an admin key too. Follows the pages to list them all, or stops after --limit. Listing does not mark them read. Any valid credential may list them.'
  static override examples = [
    '<%= config.bin %> notification list',
    '<%= config.bin %> notification list --unread',
    '<%= config.bin %> notification list --unread --json | jq -r ".notifications[] | .title"',
  ]
  static override aliases = ['notification:ls']
  static override flags = {
    columns: columnsFlag,
    unread: Flags.boolean({ description: 'only notifications not read yet' }),
    limit: Flags.integer({ description: 'list at most this many notifications (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ notifications: NotificationView[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const path = this.flags.unread ? '/notifications?unread=true' : '/notifications'
    const notifications = await listAll<NotificationView>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) {
      this.log(notifications.length === 0 ? (this.flags.unread ? 'No unread notifications.' : 'No notifications yet.') : renderNotifications(notifications))
    }
    return { notifications }
  }
}

function renderNotifications(notifications: readonly NotificationView[]): string {
  return renderTable(notifications, [
    { header: 'created', value: (n) => age(n.created_at) },
    { header: 'kind', value: (n) => n.kind },
    { header: 'title', value: (n) => n.title },
    { header: 'read', value: (n) => (n.read_at === null ? 'no' : age(n.read_at)) },
    { header: 'body', value: (n) => n.body },
  ])
}

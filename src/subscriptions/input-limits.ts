/**
 * Size limits of submitted provisioning inputs. Apart from inputs.ts (which re-exports them) so
 * that the CLI can check a value before sending it without loading the input store.
 */

export const MAX_INPUTS_PER_REQUEST = 50
/** Characters of a text or proof value. */
export const MAX_TEXT_INPUT_LENGTH = 4096

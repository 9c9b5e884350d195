/**
 * zod with the OpenAPI extension (`.openapi({ description, example })`, named components).
 * Route schemas import `z` from here so the extension is installed before any schema is built.
 */
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi'
import { z } from 'zod'

extendZodWithOpenApi(z)

// A binding of this module's own, not a re-export of zod's: a bundler that splits code
// (scripts/bundle.js) sends a re-export straight to zod, and the chunk using it then never loads
// this module, so `.openapi` would be missing.
const zodWithOpenApi: typeof z = z
export { zodWithOpenApi as z }

/**
 * zod with the OpenAPI extension (`.openapi({ description, example })`, named components).
 * Route schemas import `z` from here so the extension is installed before any schema is built.
 */
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi'
import { z } from 'zod'

extendZodWithOpenApi(z)

export { z }

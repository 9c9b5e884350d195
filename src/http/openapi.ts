/**
 * The OpenAPI 3.1 document, generated from the routes' own zod schemas (served at
 * GET /api/v1/openapi.json). Built once per app, when the app is created, so a schema the
 * generator cannot describe stops the daemon at start-up rather than on the first request.
 */
import { OpenAPIRegistry, OpenApiGeneratorV31 } from '@asteasolutions/zod-to-openapi'
import { errorBodySchema } from './http-errors.js'
import { BEARER_SCHEME, type ApiRoute } from './route.js'

export type OpenApiDocument = ReturnType<OpenApiGeneratorV31['generateDocument']>

export type ApiInfo = {
  title: string
  version: string
  description?: string
}

export const OPENAPI_PATH = '/api/v1/openapi.json'

export function buildOpenApiDocument(routes: readonly ApiRoute[], info: ApiInfo): OpenApiDocument {
  const registry = new OpenAPIRegistry()
  registry.register('Error', errorBodySchema)
  registry.registerComponent('securitySchemes', BEARER_SCHEME, {
    type: 'http',
    scheme: 'bearer',
    description: 'Authorization: Bearer <ACCESS_TOKEN> (spec, Authentication)',
  })
  for (const route of routes) registry.registerPath(route.openapi)
  return new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info,
  })
}

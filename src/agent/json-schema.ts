import type { AnyTool } from './tool.js';

/**
 * The tool's input as JSON Schema, when its schema says so itself (Standard JSON Schema: zod
 * 4.2+, arktype, valibot's converter), without depending on any schema library. Undefined when it
 * cannot: the adapter advertises an open object and oncely still validates every call.
 */
export function standardJsonSchema(tool: AnyTool): Record<string, unknown> | undefined {
  const standard = (
    tool.input as unknown as {
      '~standard': { jsonSchema?: { input(options: { target: string }): Record<string, unknown> } };
    }
  )['~standard'].jsonSchema;
  try {
    return standard?.input({ target: 'draft-07' });
  } catch {
    return undefined;
  }
}

/** The JSON Schema of an object input for frameworks that need one with `properties` and `required`. */
export function objectJsonSchema(tool: AnyTool): {
  type: 'object';
  properties: Record<string, unknown>;
  required: string[];
  additionalProperties: true;
} {
  const schema = standardJsonSchema(tool);
  const { $schema: _, ...rest } = schema ?? {};
  return {
    ...rest,
    type: 'object',
    properties: (schema?.properties as Record<string, unknown>) ?? {},
    required: (schema?.required as string[]) ?? [],
    // Open: oncely validates, so a bad input is an envelope the model can act on.
    additionalProperties: true,
  };
}

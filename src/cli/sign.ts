import { randomUUID } from 'node:crypto';
import { OncelyError } from '../core/errors.js';
import { loadApp } from '../host/app.js';
import { shellQuote, signedHeaders } from '../host/routes.js';
import { registerAppLoader } from './app-loader.js';

/**
 * A curl line that delivers `body` to webhook source `name` of the app in `dir`, signed with the
 * source's first secret from its config. The timestamp is now: run it within the source's tolerance.
 */
export async function signCommand(
  dir: string,
  name: string,
  body: string,
  options: { id?: string; url: string },
): Promise<string> {
  try {
    JSON.parse(body);
  } catch {
    throw new OncelyError('INVALID_ARGUMENT', `the body ${body} is not JSON`);
  }
  await registerAppLoader();
  const app = await loadApp(dir);
  const sources = app.config.sources ?? {};
  const source = Object.hasOwn(sources, name) ? sources[name] : undefined;
  if (!source)
    throw new OncelyError(
      'SOURCE_UNKNOWN',
      `${dir} has no webhook source ${name} (sources: ${Object.keys(sources).join(', ') || 'none'})`,
    );
  const id = options.id ?? `evt_${randomUUID()}`;
  const headers = Object.entries(signedHeaders(source, id, body)).map(([h, v]) => `-H ${shellQuote(`${h}: ${v}`)}`);
  return [
    `curl -s -X POST ${options.url}/v1/webhooks/${name}`,
    `-H 'Content-Type: application/json'`,
    ...headers,
    `--data-raw ${shellQuote(body)}`,
  ].join(' ');
}

import type { Command } from 'commander';
import { OncelyError } from '../core/errors.js';

/**
 * Every command names its app folder the same way: `--dir <dir>` everywhere, and a `[dir]`
 * argument where the command has no other arguments. Both default to the current folder.
 */
export function withDir(command: Command): Command {
  return command.option('--dir <dir>', 'app folder (same as the [dir] argument where there is one)');
}

/** The app folder of a command: `--dir`, else the `[dir]` argument, else `.`; both at once must agree. */
export function appDir(argument: string | undefined, options: { dir?: string }): string {
  if (argument !== undefined && options.dir !== undefined && argument !== options.dir)
    throw new OncelyError('INVALID_ARGUMENT', `two app folders given (${argument} and --dir ${options.dir}); give one`);
  return options.dir ?? argument ?? '.';
}

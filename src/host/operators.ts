/** The kinds of condition an operator holds; a plain value in a where means equality. */
export type OperatorKind = 'eq' | 'ne' | 'in' | 'lt' | 'lte' | 'gt' | 'gte' | 'isNull' | 'notNull' | 'increment';

/** One condition of an operator: what it tests and its operand. */
export interface OperatorPart {
  readonly kind: OperatorKind;
  readonly value: unknown;
}

/**
 * A where condition (or a patch's increment) built by `op`. Only `op` makes them: the brand is a
 * private field, which `JSON.parse`, a spread or `Object.create` can never produce, so a request
 * body that looks like `{ "ne": "x" }` stays a value and never becomes a query operator.
 */
export class Operator {
  readonly #parts: readonly OperatorPart[];

  /** Use `op`, which builds every operator there is. */
  constructor(parts: readonly OperatorPart[]) {
    this.#parts = parts;
  }

  /** The conditions of `value` when `op` built it; undefined for everything else (plain values). */
  static partsOf(value: unknown): readonly OperatorPart[] | undefined {
    return typeof value === 'object' && value !== null && #parts in value ? (value as Operator).#parts : undefined;
  }
}

const one = (kind: OperatorKind, value: unknown) => new Operator([{ kind, value }]);

/**
 * Builders of where conditions and relative patches for `ctx.store`. A plain value in a where is
 * always a value (equality, or a refusal when the column cannot hold it), never an operator.
 * @example
 * import { op } from 'oncely/host';
 * await ctx.store.find('orders', { status: op.in(['paid', 'shipped']), amountCents: op.and(op.gte(100), op.lt(500)) });
 * await ctx.store.update('products', { sku, stock: op.gte(n) }, { stock: op.increment(-n) });
 */
export const op = {
  /** Equal to `value` (the same as a plain value; null matches NULL). */
  eq: (value: unknown) => one('eq', value),
  /** Not equal to `value`, NULL-safe as in JS: a NULL column is not equal to a value; `ne(null)` is IS NOT NULL. */
  ne: (value: unknown) => one('ne', value),
  /** One of `values` (1 to 1,000 of them, no null; use isNull for NULL). */
  in: (values: readonly unknown[]) => one('in', values),
  /** Less than `value`. */
  lt: (value: unknown) => one('lt', value),
  /** Less than or equal to `value`. */
  lte: (value: unknown) => one('lte', value),
  /** Greater than `value`. */
  gt: (value: unknown) => one('gt', value),
  /** Greater than or equal to `value`. */
  gte: (value: unknown) => one('gte', value),
  /** The column is NULL. */
  isNull: () => one('isNull', true),
  /** The column is not NULL. */
  notNull: () => one('notNull', true),
  /** All of `conditions` on the same column: `op.and(op.gte(10), op.lt(20))`. */
  and: (...conditions: Operator[]) =>
    new Operator(
      conditions.flatMap((c) => {
        const parts = Operator.partsOf(c);
        if (parts === undefined) throw new TypeError('op.and takes conditions built by op');
        return parts;
      }),
    ),
  /** In a patch: adds `n` (negative to subtract) to the stored number in the statement itself. */
  increment: (n: number | bigint) => one('increment', n),
};

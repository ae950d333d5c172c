/** The flows workload both engines run: three trivial steps, started with a business id. */
import type { Operation } from './harness.js';

/** What the subjects' flows are called: oncely's workflow ids are `<name>-<bizId>`. */
export const FLOW_NAME = 'bench-three';

/** What every step returns; the flow returns the last one's. */
export interface StepValue {
  step: number;
  id: string;
}

/** A step: a trivial async function. `executed` counts its runs, so duplicates can be checked. */
export const counter = { executed: 0 };
export async function stepOf(step: number, id: string): Promise<StepValue> {
  counter.executed++;
  return { step, id };
}

/** The business id of flow `i`. */
export const bizId = (i: number): string => `order-${i}`;

/** The workload on one engine: `first` and `duplicate` start flow `i` and await its value. */
export interface FlowSubject {
  first: Operation;
  duplicate: Operation;
  close(): Promise<void>;
}

/** Checks a flow's value: the third step's, for the flow's business id. */
export function checkValue(engine: string, i: number, value: StepValue): void {
  if (value?.step !== 3 || value.id !== bizId(i))
    throw new Error(`${engine} flow ${bizId(i)} returned ${JSON.stringify(value)}`);
}

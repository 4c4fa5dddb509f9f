/**
 * Changes sent through `POST /v1/counters/increment`: in chunks that fit the gateway's limits, each
 * retried as a whole by the transport with the same ids, items the server failed one by one with a
 * retryable code sent again (same ids) after a backoff, and a batch too large for the server halved.
 */
import { fullJitterMs, sleep, type RetryOptions } from "./backoff.js";
import { decodeBatch } from "./decode.js";
import { LivecountError, type ChangeItem } from "./errors.js";
import type { HttpAnswer, HttpRequest, Transport } from "./transport.js";
import type { CounterValue } from "./types.js";

/** Largest batch body the client sends in one request, in bytes (well under the gateway's 1 MiB). */
const MAX_BATCH_BODY_BYTES = 48 * 1024;

export class BatchSender {
  constructor(
    private readonly transport: Transport,
    private readonly retry: RetryOptions,
    private readonly maxBatchItems: number,
  ) {}

  /**
   * Sends items through the batch endpoint in chunks, each retried with the same ids until it is
   * answered. Items the server failed one by one with a retryable code go again (same ids) after
   * a backoff. Resolves with each item's value or final error, in order.
   */
  async send(
    items: readonly ChangeItem[],
    signal?: AbortSignal,
  ): Promise<Array<CounterValue | LivecountError>> {
    const results: Array<CounterValue | LivecountError> = [];
    for (const chunk of this.#chunks(items)) results.push(...(await this.#sendChunk(chunk, signal)));
    return results;
  }

  #chunks(items: readonly ChangeItem[]): ChangeItem[][] {
    const chunks: ChangeItem[][] = [];
    let chunk: ChangeItem[] = [];
    let bytes = 2;
    for (const item of items) {
      const size = JSON.stringify(item).length + 1;
      if (chunk.length > 0 && (chunk.length >= this.maxBatchItems || bytes + size > MAX_BATCH_BODY_BYTES)) {
        chunks.push(chunk);
        chunk = [];
        bytes = 2;
      }
      chunk.push(item);
      bytes += size;
    }
    if (chunk.length > 0) chunks.push(chunk);
    return chunks;
  }

  async #sendChunk(
    items: readonly ChangeItem[],
    signal?: AbortSignal,
  ): Promise<Array<CounterValue | LivecountError>> {
    const results: Array<CounterValue | LivecountError | undefined> = items.map(() => undefined);
    let todo = items.map((_, i) => i);
    for (let round = 1; ; round++) {
      const batch = todo.map((i) => items[i]!);
      let answers: Array<CounterValue | LivecountError>;
      try {
        answers = await this.#postBatch(batch, signal);
      } catch (err) {
        // The transport already retried the request as a whole: this is final for its items.
        if (!(err instanceof LivecountError)) throw err;
        for (const i of todo) results[i] = err;
        return results as Array<CounterValue | LivecountError>;
      }
      // Items the server failed one by one with a retryable code go again, with the same ids.
      const again: number[] = [];
      answers.forEach((a, j) => {
        const i = todo[j]!;
        results[i] = a;
        if (a instanceof LivecountError && a.retryable && round < this.retry.attempts) again.push(i);
      });
      if (again.length === 0) return results as Array<CounterValue | LivecountError>;
      todo = again;
      await sleep(fullJitterMs(round - 1, this.retry.baseMs, this.retry.maxMs), signal);
    }
  }

  /** One batch request (retried as a whole by the transport); a batch too large for the server is halved. */
  async #postBatch(
    items: readonly ChangeItem[],
    signal?: AbortSignal,
  ): Promise<Array<CounterValue | LivecountError>> {
    const req: HttpRequest = {
      method: "POST",
      path: "/v1/counters/increment",
      body: items,
      auth: true,
      signal,
    };
    let answer: HttpAnswer;
    try {
      answer = await this.transport.send(req);
    } catch (err) {
      if (err instanceof LivecountError && err.code === "payload_too_large" && items.length > 1) {
        const half = Math.ceil(items.length / 2);
        return [
          ...(await this.#postBatch(items.slice(0, half), signal)),
          ...(await this.#postBatch(items.slice(half), signal)),
        ];
      }
      throw err;
    }
    return decodeBatch(answer.body, items);
  }
}

import type { BusEvents } from "./bus.js";

type Listener = (...args: never[]) => void;

/** The listeners of one bus's events, shared by both implementations. */
export class BusEventListeners {
  readonly #listeners = new Map<keyof BusEvents, Set<Listener>>();

  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void {
    let set = this.#listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
    };
  }

  /** Calls every listener; a throwing listener is skipped so the others still run. */
  emit<E extends keyof BusEvents>(event: E, ...args: Parameters<BusEvents[E]>): void {
    const set = this.#listeners.get(event);
    if (set === undefined) return;
    for (const listener of [...set]) {
      try {
        (listener as (...a: Parameters<BusEvents[E]>) => void)(...args);
      } catch {
        // Isolated by contract: a listener's bug must not stop the bus or the other listeners.
      }
    }
  }
}

/** A socket that remembers where it sits in `OpenSockets`. */
export interface Slotted {
  getUserData(): { openSlot: number };
}

/**
 * The sockets open now, for a shutdown to end them all: a dense array where each socket knows its
 * slot, so one closing moves the last into its place. A Set would cost every socket a hash-table
 * entry and the table's slack, several times the one array slot this does.
 */
export class OpenSockets<S extends Slotted> {
  readonly #all: S[] = [];

  get size(): number {
    return this.#all.length;
  }

  add(ws: S): void {
    ws.getUserData().openSlot = this.#all.length;
    this.#all.push(ws);
  }

  /** Forgets `ws` (a no-op when it is not here). */
  delete(ws: S): void {
    const data = ws.getUserData();
    const slot = data.openSlot;
    if (slot < 0 || this.#all[slot] !== ws) return;
    const last = this.#all.pop()!;
    if (last !== ws) {
      this.#all[slot] = last;
      last.getUserData().openSlot = slot;
    }
    data.openSlot = -1;
  }

  /** Every open socket, as an array the caller may keep while sockets close. */
  list(): S[] {
    return [...this.#all];
  }
}

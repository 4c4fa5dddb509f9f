/** A Bus that hands every call to another; tests override `publish` to observe or redirect it. */
import type { Bus, BusEvents, BusStatus, MemoryBus, Subscription } from "@livecount/bus";

export class ForwardingBus implements Bus {
  constructor(readonly local: MemoryBus) {}

  publish(subject: string, data: Uint8Array): void {
    this.local.publish(subject, data);
  }
  subscribe(...args: Parameters<Bus["subscribe"]>): Subscription {
    return this.local.subscribe(...args);
  }
  serve(...args: Parameters<Bus["serve"]>): Subscription {
    return this.local.serve(...args);
  }
  request(...args: Parameters<Bus["request"]>): Promise<Uint8Array> {
    return this.local.request(...args);
  }
  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void {
    return this.local.on(event, listener);
  }
  get status(): BusStatus {
    return this.local.status;
  }
  get maxPayload(): number {
    return this.local.maxPayload;
  }
  flush(): Promise<void> {
    return this.local.flush();
  }
  reconnect(): boolean {
    return this.local.reconnect();
  }
  close(): Promise<void> {
    return this.local.close();
  }
}

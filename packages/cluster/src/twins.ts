/**
 * Two live processes under one node id, counter nodes (membership.ts) or gateways
 * (gateway_heartbeat.ts): which one keeps it. Both processes apply the same rule to the same two
 * starts and reach the same answer.
 */

/** A process as its heartbeats show it. */
export interface ProcessStart {
  readonly incarnation: string;
  /** Its start, by its own wall clock. */
  readonly startedAt: number;
}

/**
 * Whether `other`, heard beating under this process's node id, replaced `self`: it started later,
 * each by its own clock, ties going to the greater incarnation, so both processes reach the same
 * answer. Itself (its own heartbeat echoed) is never its twin.
 */
export function isLaterTwin(self: ProcessStart, other: ProcessStart): boolean {
  if (other.incarnation === self.incarnation) return false;
  return (
    other.startedAt > self.startedAt ||
    (other.startedAt === self.startedAt && other.incarnation > self.incarnation)
  );
}

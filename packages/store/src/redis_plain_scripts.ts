/**
 * The Redis store's scripts that change no entry, and so keep no digest: partition leases, and
 * reads of whole pages (redis_scripts.ts has the rest, and the conventions all share).
 */

/**
 * The time leases run on, in epoch-ms: the caller's `now` when it sends one (a store given its own
 * clock: tests drive leases with a manual one), else the server's own (TIME). So in production each
 * lease is stamped and checked by the clock of the server that holds it, and every process agrees
 * on it whatever its own clock says.
 */
const LUA_LEASE_CLOCK = `
local function lease_now(caller_now)
  if caller_now ~= "" then return tonumber(caller_now) end
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/** Partition leases: who owns a partition, under which epoch, until when. */
export const LEASE_SCRIPTS = {
  /**
   * KEYS: lease, epoch. ARGV: node, now ("": the server's), ttl, reclaimFrom ("" for none). Returns {epoch,
   * expiresAt}, or nil while another node (not a previous incarnation named by reclaimFrom) holds it.
   */
  lcAcquire: `${LUA_LEASE_CLOCK}
local now = lease_now(ARGV[2])
local expires = now + tonumber(ARGV[3])
local lease = redis.call("HMGET", KEYS[1], "node", "epoch", "expiresAt")
if lease[1] and now < tonumber(lease[3]) then
  if lease[1] == ARGV[1] then
    redis.call("HSET", KEYS[1], "expiresAt", string.format("%d", expires))
    return {tonumber(lease[2]), expires}
  end
  if ARGV[4] == "" or string.sub(lease[1], 1, #ARGV[4]) ~= ARGV[4] then return false end
end
local epoch = redis.call("INCR", KEYS[2])
redis.call("HSET", KEYS[1], "node", ARGV[1], "epoch", epoch, "expiresAt", string.format("%d", expires))
return {epoch, expires}`,

  /**
   * KEYS: lease. ARGV: node, epoch, now ("": the server's), ttl. Returns the new expiresAt if renewed, 0 if lost. A
   * lease that ran out but still names this holder and epoch is renewed too: nobody took it
   * meanwhile (a takeover writes its own node and a new epoch), so no other fence was ever current
   * for it.
   */
  lcRenew: `${LUA_LEASE_CLOCK}
local lease = redis.call("HMGET", KEYS[1], "node", "epoch")
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return 0 end
local expires = lease_now(ARGV[3]) + tonumber(ARGV[4])
redis.call("HSET", KEYS[1], "expiresAt", string.format("%d", expires))
return expires`,

  /**
   * KEYS: bus notes. ARGV: node, "1" when the node's hearing of its bus goes on since its last note
   * (else a stretch begins). Stamped with Redis's own clock: every node's notes on one clock.
   */
  lcBusNote: `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = now
if ARGV[2] == "1" then
  local old = redis.call("HGET", KEYS[1], ARGV[1])
  local s = old and tonumber(string.match(old, "^(%d+):") or "")
  -- A start later than now is another server's clock (a failover to a replica behind): begin anew.
  if s and s <= now then since = s end
end
redis.call("HSET", KEYS[1], ARGV[1], string.format("%d:%d", since, now))
return 1`,

  /**
   * KEYS: bus notes. ARGV: maxAgeMs. Returns Redis's clock now, then node, note, node, note...;
   * removes notes older than maxAgeMs (nodes gone, or renamed: a random node id per start).
   */
  lcBusNotes: `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call("HGETALL", KEYS[1])
local out = { string.format("%d", now) }
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], ":(%d+)$") or "0")
  if at < now - tonumber(ARGV[1]) then
    redis.call("HDEL", KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out`,

  /** KEYS: lease. ARGV: node, epoch. */
  lcRelease: `
local lease = redis.call("HMGET", KEYS[1], "node", "epoch")
if lease[1] == ARGV[1] and lease[2] == ARGV[2] then redis.call("DEL", KEYS[1]) end
return 0`,
} as const;

/** Reads of whole pages, filtered or packed in Redis. */
export const READ_SCRIPTS = {
  /**
   * KEYS: a page. ARGV: "1" to keep the entries whose counter starts with one of the prefixes that
   * follow, "0" to keep the others. Returns their fields and values, flat: filtered here, so what is
   * left out of a large page stays in Redis.
   */
  lcLoadPrefixed: `
local fields, out, keep = redis.call("HGETALL", KEYS[1]), {}, ARGV[1] == "1"
for i = 1, #fields, 2 do
  local matched = false
  for a = 2, #ARGV do
    if string.sub(fields[i], 1, #ARGV[a]) == ARGV[a] then
      matched = true
      break
    end
  end
  if matched == keep then
    out[#out + 1] = fields[i]
    out[#out + 1] = fields[i + 1]
  end
end
return out`,

  /** KEYS: pages. Returns one MessagePack array: per page, its fields and values, flat (HGETALL's). */
  lcLoad: `
local pages = {}
for i = 1, #KEYS do pages[i] = redis.call("HGETALL", KEYS[i]) end
return cmsgpack.pack(pages)`,
} as const;

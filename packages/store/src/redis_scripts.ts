/**
 * The Redis store's Lua scripts. Each runs atomically; each receives its keys and arguments as
 * listed. Numbers travel as decimal strings, or inside one MessagePack argument where a script
 * takes a batch; `string.format("%d")` writes them back exactly (plain tostring would switch to
 * exponent form). Every script that changes an entry keeps the partition's
 * digests (digest.ts) and bucket index current in the same step, so a digest never disagrees with
 * the entries it sums up.
 */
import { LUA_HELPERS, WRITE_KEYS } from "./redis_lua.js";
import { LEASE_SCRIPTS, READ_SCRIPTS } from "./redis_plain_scripts.js";

export const SCRIPTS = {
  ...LEASE_SCRIPTS,
  ...READ_SCRIPTS,
  /**
   * KEYS: lease, pages, nonzero index, digest, bucket index, empty index, tombstone index, window
   * index (all of the fence's partition), then one key per page written. ARGV: fence, now, then the
   * writes as one MessagePack array (one argument instead of six per write: building and sending
   * arguments was most of a flush's cost): per page, its id, bucket and entry count, then field, p,
   * n, indexed (boolean) per entry. Returns 1 if applied, 0 if the fence is stale.
   */
  lcWrite: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1]) then return 0 end
local floor = tonumber(redis.call("HGET", KEYS[4], "hw") or "0")
hw_raised = floor
expiring_key = KEYS[8]
local w = cmsgpack.unpack(ARGV[3])
local at = 1
for k = 9, #KEYS do
  local page_key, page, bucket, count = KEYS[k], w[at], w[at + 1], w[at + 2]
  at = at + 3
  -- "durable" here: known not to be empty (a durable counter, or a viewer present).
  local durable = false
  -- Presence fields as stored after this run, by field (zero or not): one written twice in the
  -- group counts by its last value.
  local present = {}
  -- Registers, merged together after the other entries (they leave a page as empty as it was).
  local regs = {}
  for _ = 1, count do
    local field, p, n = w[at], w[at + 1], w[at + 2]
    at = at + 4
    if is_register(field) and not w[at - 1] then
      regs[#regs + 1] = field
      regs[#regs + 1] = p
      regs[#regs + 1] = n
    else
      local _, existed, zero = merge_entry(page_key, page, bucket, field, p, n, w[at - 1])
      if not is_presence(field) and not is_visit(field) and not expired(field) and (existed or p > 0 or n > 0) then
        durable = true
      elseif is_presence(field) and existed ~= nil then
        present[field] = not zero
      end
    end
  end
  merge_registers(page_key, page, bucket, regs)
  -- A viewer present: not empty, known from its field instead of reading the whole page (which
  -- holds up to thousands of unique-visitor registers).
  for _, viewers in pairs(present) do durable = durable or viewers end
  note_emptiness(KEYS[6], page_key, page, ARGV[2], durable)
end
apply_digests(KEYS[4])
if hw_raised > floor then redis.call("HSET", KEYS[4], "hw", string.format("%d", hw_raised)) end
return 1`,

  /**
   * KEYS: lease, pages, nonzero index, digest, bucket index, empty index, tombstone index, window
   * index (all of the fence's partition), then one key per page. ARGV: fence, now, the end of the
   * fields of indexed entries (a NUL and the DC whose presence entries are indexed), then the pages
   * as one MessagePack array (as lcWrite takes its writes): per page, page, bucket, entry count,
   * then field, p, n per entry. Returns 0 if the fence is stale, else one MessagePack array (one
   * reply to decode instead of a nested array per page): per page where an entry advanced, its index
   * (1-based, in KEYS order), how many entries advanced, then each one's field and value. A page not
   * in the store with only presence entries at zero is left out, as are a purged counter's remains.
   */
  lcMerge: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1]) then return 0 end
local floor = tonumber(redis.call("HGET", KEYS[4], "hw") or "0")
hw_raised = floor
local purge_floor = tonumber(redis.call("HGET", KEYS[4], "pf") or "0")
expiring_key = KEYS[8]
local advanced = {}
local m = cmsgpack.unpack(ARGV[4])
local a = 0
for i = 9, #KEYS do
  local page, bucket, count = m[a + 1], m[a + 2], m[a + 3]
  local first = a + 4
  a = a + 3 + 3 * count
  local skip = redis.call("EXISTS", KEYS[i]) == 0
  for e = first, a, 3 do
    if not skip then break end
    if not (is_visit(m[e]) or (is_presence(m[e]) and m[e + 1] == m[e + 2])) then skip = false end
  end
  if not skip then
    local remains = purged_remains(KEYS[i], m, first, a, purge_floor)
    local count_at, durable = #advanced + 2, false
    advanced[count_at - 1] = i - 8
    advanced[count_at] = 0
    for e = first, a, 3 do
      local field = m[e]
      if next(remains) == nil or not remains[counter_of(field)] then
        local p, n = m[e + 1], m[e + 2]
        local indexed = is_presence(field) and string.sub(field, -#ARGV[3]) == ARGV[3]
        local value, existed = merge_entry(KEYS[i], page, bucket, field, p, n, indexed)
        if value then
          advanced[#advanced + 1] = field
          advanced[#advanced + 1] = value
          advanced[count_at] = advanced[count_at] + 1
        end
        if not is_presence(field) and not is_visit(field) and not expired(field) and (existed or p > 0 or n > 0) then
          durable = true
        end
      end
    end
    -- Nothing advanced: the page is left out of the reply.
    if advanced[count_at] == 0 then
      advanced[count_at] = nil
      advanced[count_at - 1] = nil
    end
    note_emptiness(KEYS[6], KEYS[i], page, ARGV[2], durable)
  end
end
apply_digests(KEYS[4])
if hw_raised > floor then redis.call("HSET", KEYS[4], "hw", string.format("%d", hw_raised)) end
return cmsgpack.pack(advanced)`,

  /**
   * Publisher increments of one partition, in order, atomically. KEYS: the partition's entry script
   * keys (lease, pages, nonzero index, digest, bucket index, empty index, tombstone index, expiring
   * index), then each page the ops change once, then per op its idempotency key. ARGV: fence, now,
   * expiresAt and keyTtlMs of the keys, then two MessagePack arrays (one argument each instead of a
   * dozen per op: writing and reading arguments was most of a call's cost on both sides): the pages,
   * as page and bucket per page key, and the ops, per op its page's index (1-based), field, counter,
   * delta, payload, fingerprint ("" for none), startAt (where the entry of `field` starts when
   * absent), the number of further changes, then a field and a delta per further change. Returns
   * one MessagePack array (one reply to decode instead of five per op): {"stale"} when the fence is,
   * else one reply per op: {"applied", p, n, p2, n2, ...} | {"duplicate", payload, entry now, ...}
   * | {"conflict"} | {"too_large"} (a change would take its entry past 2^53 - 1; nothing applied).
   */
  lcIncrement: `${LUA_HELPERS}
local now = tonumber(ARGV[2])
if not fence_current(KEYS[1], ARGV[1]) then return cmsgpack.pack({"stale"}) end
expiring_key = KEYS[8]
local expires_at, key_ttl_ms = ARGV[3], ARGV[4]
local page_of, w = cmsgpack.unpack(ARGV[5]), cmsgpack.unpack(ARGV[6])
-- The entries the run changes, by page key and field: read once, changed in memory op after op, and
-- written once at its end (a hot page's counter changes with every op of the run). Each holds p, n,
-- whether it exists as of the ops so far, its value before the run (false when absent) and whether
-- it changed. The digests are of the state, so one write from the first to the last value keeps them
-- as the writes op by op would. Per page: its index, whether the run created an entry of it and
-- whether it stored one.
local entries, pages = {}, {}
local function entry_of(page_key, index, field)
  local fields = entries[page_key]
  if not fields then
    fields = {}
    entries[page_key] = fields
    pages[page_key] = {index = index, created = false, stored = false}
  end
  local e = fields[field]
  if not e then
    local p, n, existed = read_entry(page_key, field)
    -- Refused here, while the run has written nothing: Redis keeps a failed script's writes.
    if not p then error("unreadable entry " .. field .. " of " .. page_key) end
    e = {p = p, n = n, exists = existed, old = existed and format_entry(p, n), changed = false}
    fields[field] = e
  end
  return e
end
-- An entry as it is now: "p:n", or "" where absent.
local function entry_now(page_key, field)
  local e = entries[page_key] and entries[page_key][field]
  if not e then return redis.call("HGET", page_key, field) or "" end
  return e.exists and format_entry(e.p, e.n) or ""
end
-- The idempotency keys the run's applied ops record, by key: {counter, delta, payload, expiresAt,
-- fingerprint or false}. Written after the entries, so a run that fails part way never leaves a key
-- saying "applied" over changes it did not store; a later op of the run with the same key finds it here.
local recorded, recorded_keys = {}, {}
-- One op: w from a, and its idempotency key.
local function increment(idem_key, a)
  local index = w[a]
  local page_key = KEYS[8 + index]
  local field, counter, delta, fingerprint = w[a + 1], w[a + 2], w[a + 3], w[a + 5]
  local further_to = a + 7 + 2 * w[a + 7]
  local seen = recorded[idem_key]
    or redis.call("HMGET", idem_key, "counter", "delta", "payload", "expiresAt", "fingerprint")
  if seen[1] and now < tonumber(seen[4]) then
    local same
    if fingerprint ~= "" then same = seen[5] == fingerprint
    else same = not seen[5] and seen[1] == counter and seen[2] == delta end
    if same then
      -- The entries as they are now, "" where absent: the op's, then each further change's.
      local reply = {"duplicate", seen[3], entry_now(page_key, field)}
      for i = a + 8, further_to, 2 do reply[#reply + 1] = entry_now(page_key, w[i]) end
      return reply
    end
    return {"conflict"}
  end
  -- Entries are safe integers on every replica: an op that would take one past stays unapplied (and
  -- its key unrecorded). Checked after the key, so a retry of an op that applied is a duplicate.
  -- Exact in doubles: both terms are at most 2^53 - 1, and a sum past it rounds to 2^53 or more.
  local function fits(f, d, start)
    if d == 0 then return true end
    local e = entry_of(page_key, index, f)
    local p, n = e.p, e.n
    if not e.exists then p, n = start, start end
    if d > 0 then return p + d <= 9007199254740991 end
    return n - d <= 9007199254740991
  end
  if not fits(field, tonumber(delta), w[a + 6]) then return {"too_large"} end
  for i = a + 8, further_to, 2 do
    if not fits(w[i], w[i + 1], 0) then return {"too_large"} end
  end
  local result = {"applied"}
  local function change(f, d, start)
    local e = entry_of(page_key, index, f)
    -- An entry started at the floor is stored even when nothing is added, as the op reports it.
    if d ~= 0 or (not e.exists and start > 0) then
      if not e.exists then
        e.p, e.n, e.exists = start, start, true
        pages[page_key].created = true
      end
      if d > 0 then e.p = e.p + d else e.n = e.n - d end
      e.changed = true
      pages[page_key].stored = true
    end
    result[#result + 1] = e.p
    result[#result + 1] = e.n
    return e
  end
  local state = change(field, tonumber(delta), w[a + 6])
  -- The payload's {own} placeholders become this entry's value right after the op (store.ts).
  local payload = string.gsub(w[a + 4], "{own}", string.format("%d", state.p - state.n))
  for i = a + 8, further_to, 2 do change(w[i], w[i + 1], 0) end
  recorded[idem_key] = {counter, delta, payload, expires_at, fingerprint ~= "" and fingerprint}
  recorded_keys[#recorded_keys + 1] = idem_key
  return result
end
local replies, a = {}, 1
for k = 9 + #page_of / 2, #KEYS do
  replies[#replies + 1] = increment(KEYS[k], a)
  a = a + 8 + 2 * w[a + 7]
end
for page_key, fields in pairs(entries) do
  local pg = pages[page_key]
  local page, bucket = page_of[2 * pg.index - 1], page_of[2 * pg.index]
  for field, e in pairs(fields) do
    if e.changed then set_field(page_key, page, bucket, field, e.old, format_entry(e.p, e.n), KEYS[7], now) end
  end
  if pg.created then
    redis.call("ZADD", KEYS[2], 0, page)
    redis.call("ZADD", KEYS[5], bucket, page)
  end
  -- A durable counter: the page is not empty any more (a run that stored nothing leaves it be).
  if pg.stored then redis.call("ZREM", KEYS[6], page) end
end
apply_digests(KEYS[4])
for _, idem_key in ipairs(recorded_keys) do
  local r = recorded[idem_key]
  if r[5] then
    redis.call("HSET", idem_key, "counter", r[1], "delta", r[2], "payload", r[3], "expiresAt", r[4], "fingerprint", r[5])
  else
    redis.call("HSET", idem_key, "counter", r[1], "delta", r[2], "payload", r[3], "expiresAt", r[4])
  end
  redis.call("PEXPIRE", idem_key, key_ttl_ms)
end
return cmsgpack.pack(replies)`,

  /**
   * KEYS: lease, page, pages, bucket index, empty index, digest, expiring index. ARGV: fence, now,
   * page, emptySince, bucket. Removes the page if it has been empty since emptySince or earlier and
   * still is: 1 removed, 0 kept, -1 the fence is stale. Its entries are zero presence, which no
   * digest or non-zero index holds, and visit records, which leave the digest and the expiring index.
   */
  lcRemoveIfEmpty: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1]) then return -1 end
local since = redis.call("ZSCORE", KEYS[5], ARGV[3])
if not since or tonumber(since) > tonumber(ARGV[4]) then return 0 end
if not page_empty(KEYS[2]) then
  redis.call("ZREM", KEYS[5], ARGV[3])
  return 0
end
local fields = redis.call("HGETALL", KEYS[2])
for i = 1, #fields, 2 do
  if is_visit(fields[i]) then
    entry_changed(ARGV[3], ARGV[5], fields[i], fields[i + 1], nil)
    redis.call("ZREM", KEYS[7], ARGV[3] .. "\\0" .. fields[i])
  end
end
apply_digests(KEYS[6])
redis.call("DEL", KEYS[2])
redis.call("ZREM", KEYS[3], ARGV[3])
redis.call("ZREM", KEYS[4], ARGV[3])
redis.call("ZREM", KEYS[5], ARGV[3])
return 1`,

  /**
   * KEYS: lease, pages, digest, bucket index, empty index, tombstone index (all of the fence's
   * partition), then one key per page. ARGV: fence, now, deletedBefore, then per page: page, bucket.
   * Purges the page's deleted counters that may go (Store.purgeTombstones) if its tombstones last
   * changed at deletedBefore or earlier. Returns -1 if the fence is stale, else {floor, kept, stay,
   * then per page that lost counters its index (1-based, in KEYS order of pages) and their names}.
   */
  lcPurge: `${LUA_HELPERS}
local now = ARGV[2]
if not fence_current(KEYS[1], ARGV[1]) then return -1 end
local floor = tonumber(redis.call("HGET", KEYS[3], "pf") or "0")
local kept, stay, out = 0, 0, {}
for i = 7, #KEYS do
  local page, bucket = ARGV[2 + (i - 6) * 2], ARGV[3 + (i - 6) * 2]
  local since = redis.call("ZSCORE", KEYS[6], page)
  if since and tonumber(since) <= tonumber(ARGV[3]) then
    local fields = redis.call("HGETALL", KEYS[i])
    local values, names = {}, {}
    for f = 1, #fields, 2 do
      local counter = counter_of(fields[f])
      if not values[counter] then
        values[counter], names[counter] = {}, {}
      end
      table.insert(values[counter], fields[f + 1])
      table.insert(names[counter], fields[f])
    end
    local gone, left = {}, false
    for name, tomb in pairs(values) do
      if is_tombstone(name) then
        local counter = string.sub(name, 6)
        local at = purgeable_at(values[counter] or {}, tomb)
        if at then
          if at > floor then floor = at end
          for _, c in ipairs({counter, name}) do
            -- A settled delete: digests left it out already; the tombstone digest did not.
            for k, field in ipairs(names[c] or {}) do
              redis.call("HDEL", KEYS[i], field)
              if c == name then tomb_changed(page, field, values[c][k], nil) end
            end
          end
          gone[#gone + 1] = counter
        else
          kept = kept + 1
          left = true
        end
      end
    end
    if left then stay = stay + 1 else redis.call("ZREM", KEYS[6], page) end
    if redis.call("EXISTS", KEYS[i]) == 0 then
      redis.call("ZREM", KEYS[2], page)
      redis.call("ZREM", KEYS[4], page)
      redis.call("ZREM", KEYS[5], page)
    else
      note_emptiness(KEYS[5], KEYS[i], page, now, false)
    end
    if #gone > 0 then
      out[#out + 1] = i - 6
      out[#out + 1] = gone
    end
  end
end
apply_digests(KEYS[3])
redis.call("HSET", KEYS[3], "pf", string.format("%d", floor))
local reply = {string.format("%d", floor), kept, stay}
for _, v in ipairs(out) do reply[#reply + 1] = v end
return reply`,

  /**
   * KEYS: lease, pages, digest, bucket index, empty index, expiring index (all of the fence's
   * partition), then one page key per page. ARGV: fence, now, then per page: page, bucket, field count
   * and its window bucket fields. Removes each field still in the expiring index as expired at `now`,
   * keeping digests and indexes (Store.removeExpiredBuckets). Returns -1 if the fence is stale, else
   * how many entries went.
   */
  lcDropBuckets: `${LUA_HELPERS}
local now = tonumber(ARGV[2])
if not fence_current(KEYS[1], ARGV[1]) then return -1 end
local removed, a = 0, 2
for i = 7, #KEYS do
  local page, bucket, count = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  for f = a + 4, a + 3 + count do
    local member = page .. "\\0" .. ARGV[f]
    local due = redis.call("ZSCORE", KEYS[6], member)
    if due and tonumber(due) <= now then
      local value = redis.call("HGET", KEYS[i], ARGV[f])
      if value then
        redis.call("HDEL", KEYS[i], ARGV[f])
        entry_changed(page, bucket, ARGV[f], value, nil)
        removed = removed + 1
      end
      redis.call("ZREM", KEYS[6], member)
    end
  end
  a = a + 3 + count
  if redis.call("EXISTS", KEYS[i]) == 0 then
    redis.call("ZREM", KEYS[2], page)
    redis.call("ZREM", KEYS[4], page)
    redis.call("ZREM", KEYS[5], page)
  else
    note_emptiness(KEYS[5], KEYS[i], page, ARGV[2], false)
  end
end
apply_digests(KEYS[3])
return removed`,

  /**
   * KEYS: lease, then one idempotency key per record. ARGV: fence, expiresAt, keyTtlMs, then per
   * record: counter, delta, payload, fingerprint ("" for none). Replaces each key's record as
   * lcIncrement writes it (Store.restoreKeys): 1, or 0 if the fence is stale.
   */
  lcRestoreKeys: `${LUA_HELPERS}
${WRITE_KEYS}
if not fence_current(KEYS[1], ARGV[1]) then return 0 end
write_keys(2, 4, ARGV[2], ARGV[3], false, 0)
return 1`,

  /**
   * KEYS: one idempotency key per record. ARGV: now, expiresAt, keyTtlMs, then per record as
   * lcRestoreKeys. Writes each where the key holds no record live at `now` (Store.importKeys), as
   * lcIncrement judges it; returns how many.
   */
  lcImportKeys: `${WRITE_KEYS}
return write_keys(1, 4, ARGV[2], ARGV[3], true, tonumber(ARGV[1]))`,

  /** KEYS: lease, digest. ARGV: fence, now, floor. Returns 1 if the floor is at least floor now, 0 if the fence is stale. */
  lcRaisePurgeFloor: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1]) then return 0 end
if tonumber(ARGV[3]) > tonumber(redis.call("HGET", KEYS[2], "pf") or "0") then
  redis.call("HSET", KEYS[2], "pf", ARGV[3])
end
return 1`,

  /** KEYS: lease, digest. ARGV: fence, now. Returns 1 if marked, 0 if the fence is stale. */
  lcMarkBootstrapped: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1]) then return 0 end
redis.call("HSET", KEYS[2], "boot", "1")
return 1`,
} as const;

export type ScriptName = keyof typeof SCRIPTS;

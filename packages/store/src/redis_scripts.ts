/**
 * The Redis store's Lua scripts. Each runs atomically; each receives its keys and arguments as
 * listed. Numbers travel as decimal strings; `string.format("%d")` writes them back exactly (plain
 * tostring would switch to exponent form). Every script that changes an entry keeps the partition's
 * digests (digest.ts) and bucket index current in the same step, so a digest never disagrees with
 * the entries it sums up.
 */
import { LUA_DIGEST, ZERO_DIGEST } from "./digest.js";

/** Lua shared by the scripts that change entries. */
const LUA_HELPERS = `${LUA_DIGEST}
local ZERO = "${ZERO_DIGEST}"
local function fence_current(lease_key, epoch, now)
  local lease = redis.call("HMGET", lease_key, "epoch", "expiresAt")
  return lease[1] == epoch and now < tonumber(lease[2])
end
local function read_entry(page_key, field)
  local v = redis.call("HGET", page_key, field)
  if not v then return 0, 0, false end
  local p, n = string.match(v, "^(%d+):(%d+)$")
  return tonumber(p), tonumber(n), true
end
local function format_entry(p, n)
  return string.format("%d:%d", p, n)
end
local function is_tombstone(field)
  return string.sub(field, 1, 5) == "@del:"
end
-- Digest changes of one script run, by bucket (two 32-bit lanes), applied once at the end.
local changed_hi, changed_lo = {}, {}
-- A nil new_value: the entry was removed.
local function entry_changed(page, bucket, field, old_value, new_value)
  local hi, lo = 0, 0
  if new_value then hi, lo = entry_lanes(page, field, new_value) end
  if old_value then
    local old_hi, old_lo = entry_lanes(page, field, old_value)
    hi, lo = bit.bxor(hi, old_hi), bit.bxor(lo, old_lo)
  end
  changed_hi[bucket] = bit.bxor(changed_hi[bucket] or 0, hi)
  changed_lo[bucket] = bit.bxor(changed_lo[bucket] or 0, lo)
end
-- Every tombstone entry, settled or not, in the partition's tombstone digest ("t" in the digest
-- hash): what two DCs compare to know they hold the same tombstones (a purge waits for that).
local tomb_hi, tomb_lo = 0, 0
local function tomb_changed(page, field, old_value, new_value)
  for _, v in ipairs({old_value or false, new_value or false}) do
    if v then
      local hi, lo = entry_lanes(page, field, v)
      tomb_hi, tomb_lo = bit.bxor(tomb_hi, hi), bit.bxor(tomb_lo, lo)
    end
  end
end
-- A page whose every entry is a zero presence entry: no viewer anywhere, no durable counter.
local function page_empty(page_key)
  local fields = redis.call("HGETALL", page_key)
  if #fields == 0 then return false end
  for i = 1, #fields, 2 do
    if not (is_presence(fields[i]) and is_zero(fields[i + 1])) then return false end
  end
  return true
end
-- Keeps the partition's index of empty pages: since when a page is empty, removed once it is not.
-- A page known to hold a durable counter is not empty, without reading it.
local function note_emptiness(empty_key, page_key, page, now, durable)
  if not durable and page_empty(page_key) then redis.call("ZADD", empty_key, "NX", now, page)
  else redis.call("ZREM", empty_key, page) end
end
local function xor_stored(digest_key, field, hi, lo)
  local old_hi, old_lo = digest_lanes(redis.call("HGET", digest_key, field) or ZERO)
  redis.call("HSET", digest_key, field, lanes_digest(bit.bxor(old_hi, hi), bit.bxor(old_lo, lo)))
end
-- The counter of a page hash field "{counter}\\0{dc}".
local function counter_of(field)
  return string.sub(field, 1, string.find(field, "\\0", 1, true) - 1)
end
-- Whether a deleted counter may be purged (page_merge.ts, purgeableAt): from its entries' and its
-- tombstone's values ("p:n"), the one entry's z, or nil when it must stay.
local function purgeable_at(values, tomb_values)
  local deleted_at = 0
  for _, v in ipairs(tomb_values) do
    local p = tonumber(string.match(v, "^(%d+):"))
    if p > deleted_at then deleted_at = p end
  end
  if #values > 1 then return nil end
  local z = 0
  if #values == 1 then
    local p, n = string.match(values[1], "^(%d+):(%d+)$")
    if p ~= n then return nil end
    z = tonumber(p)
  end
  if 2 * z == deleted_at then return z end
  return nil
end
-- A settled delete (digest.ts) counts nothing in digests. Digests follow that rule on pages in the
-- tombstone index (every page a tombstone was written to by this release): XORs the entries of the
-- counter and its tombstone into this run's digest changes when the delete of the counter is settled,
-- nothing otherwise. Called around a change of one of them: before (count it while it changes) and
-- after (leave it out again if still settled).
local function toggle_settled(page_key, page, bucket, counter)
  local tomb = "@del:" .. counter
  local fields = redis.call("HGETALL", page_key)
  local cvalues, tvalues, group = {}, {}, {}
  for i = 1, #fields, 2 do
    local c = counter_of(fields[i])
    if c == counter then cvalues[#cvalues + 1] = fields[i + 1] end
    if c == tomb then tvalues[#tvalues + 1] = fields[i + 1] end
    if c == counter or c == tomb then group[#group + 1] = i end
  end
  if #tvalues == 0 or not purgeable_at(cvalues, tvalues) then return end
  for _, i in ipairs(group) do entry_changed(page, bucket, fields[i], nil, fields[i + 1]) end
end
-- A page enters the tombstone index: every settled delete it holds leaves its digests (it was
-- counted before, as on any page outside the index).
local function settle_page(page_key, page, bucket)
  local seen = {}
  for _, field in ipairs(redis.call("HKEYS", page_key)) do
    local c = counter_of(field)
    if is_tombstone(c) and not seen[c] then
      seen[c] = true
      toggle_settled(page_key, page, bucket, string.sub(c, 6))
    end
  end
end
-- The deleted counter whose settled state a change of the field may change: its own counter or, for
-- a tombstone, the one it deletes; nil for presence.
local function delete_group(field)
  if is_presence(field) then return nil end
  local c = counter_of(field)
  if is_tombstone(c) then return string.sub(c, 6) end
  return c
end
-- Sets a field of a page hash, keeping digests (settled deletes included) and the tombstone index
-- (tombs_key, scored now) current. old is the value it replaces (false when new).
local function set_field(page_key, page, bucket, field, old, value, tombs_key, now)
  local group = delete_group(field)
  local indexed_page = group and redis.call("ZSCORE", tombs_key, page)
  if indexed_page then toggle_settled(page_key, page, bucket, group) end
  redis.call("HSET", page_key, field, value)
  entry_changed(page, bucket, field, old, value)
  if is_tombstone(field) then
    -- On a page entering the index, the value replaced was never in the tombstone digest.
    tomb_changed(page, field, (indexed_page and old) or false, value)
    redis.call("ZADD", tombs_key, now, page)
    if not indexed_page then
      settle_page(page_key, page, bucket)
      -- Tombstones the page held from before it entered the index join the tombstone digest now.
      local fields = redis.call("HGETALL", page_key)
      for i = 1, #fields, 2 do
        if fields[i] ~= field and is_tombstone(fields[i]) then tomb_changed(page, fields[i], false, fields[i + 1]) end
      end
      return
    end
  end
  if indexed_page then toggle_settled(page_key, page, bucket, group) end
end
-- Max-merges one entry into a page hash, keeping the partition's page list, bucket index, index of
-- non-zero indexed entries, tombstone index and presence floor (hw_raised) current. KEYS of the
-- caller: 2 pages, 3 non-zero index, 5 bucket index, 7 tombstone index; ARGV[2] is now. Returns the
-- entry as stored if it advanced (else nil), and whether it existed before.
local hw_raised = 0
local function merge_entry(page_key, page, bucket, field, p, n, indexed)
  local old_p, old_n, existed = read_entry(page_key, field)
  local new_p, new_n = math.max(p, old_p), math.max(n, old_n)
  local value = nil
  if p > old_p or n > old_n then
    value = format_entry(new_p, new_n)
    set_field(page_key, page, bucket, field, existed and format_entry(old_p, old_n), value, KEYS[7], ARGV[2])
    if not existed then
      redis.call("ZADD", KEYS[2], 0, page)
      redis.call("ZADD", KEYS[5], bucket, page)
    end
  end
  if indexed then
    -- The index only changes when the entry becomes zero or stops being zero (or is new).
    if not existed or (old_p ~= old_n) ~= (new_p ~= new_n) then
      if new_p ~= new_n then redis.call("SADD", KEYS[3], page .. "\\0" .. field)
      else redis.call("SREM", KEYS[3], page .. "\\0" .. field) end
    end
    if new_p > hw_raised then hw_raised = new_p end
  end
  return value, existed
end
-- The counters (with their tombstones) of an incoming record, ARGV[first..last] as field, p, n,
-- that are a purged counter's remains (page_merge.ts, purgedRemains), as a set.
local function purged_remains(page_key, first, last, floor)
  local remains, values, has_tomb = {}, {}, false
  for e = first, last, 3 do
    local counter = counter_of(ARGV[e])
    if is_tombstone(counter) then has_tomb = true end
    values[counter] = values[counter] or {}
    table.insert(values[counter], ARGV[e + 1] .. ":" .. ARGV[e + 2])
  end
  if not has_tomb then return remains end
  local held = {}
  local fields = redis.call("HKEYS", page_key)
  for _, field in ipairs(fields) do held[counter_of(field)] = true end
  for name, tomb in pairs(values) do
    if is_tombstone(name) then
      local counter = string.sub(name, 6)
      if not held[counter] and not held[name] then
        local at = purgeable_at(values[counter] or {}, tomb)
        if at and at <= floor then
          remains[counter] = true
          remains[name] = true
        end
      end
    end
  end
  return remains
end
local function apply_digests(digest_key)
  local all_hi, all_lo = 0, 0
  for bucket, hi in pairs(changed_hi) do
    local lo = changed_lo[bucket]
    if hi ~= 0 or lo ~= 0 then
      xor_stored(digest_key, "b" .. bucket, hi, lo)
      all_hi, all_lo = bit.bxor(all_hi, hi), bit.bxor(all_lo, lo)
    end
  end
  if all_hi ~= 0 or all_lo ~= 0 then xor_stored(digest_key, "all", all_hi, all_lo) end
  if tomb_hi ~= 0 or tomb_lo ~= 0 then xor_stored(digest_key, "t", tomb_hi, tomb_lo) end
end
`;

export const SCRIPTS = {
  /**
   * KEYS: lease, epoch. ARGV: node, now, expiresAt, reclaimFrom ("" for none). Returns the epoch, or
   * nil while another node (not a previous incarnation named by reclaimFrom) holds it.
   */
  lcAcquire: `
local lease = redis.call("HMGET", KEYS[1], "node", "epoch", "expiresAt")
if lease[1] and tonumber(ARGV[2]) < tonumber(lease[3]) then
  if lease[1] == ARGV[1] then
    redis.call("HSET", KEYS[1], "expiresAt", ARGV[3])
    return tonumber(lease[2])
  end
  if ARGV[4] == "" or string.sub(lease[1], 1, #ARGV[4]) ~= ARGV[4] then return false end
end
local epoch = redis.call("INCR", KEYS[2])
redis.call("HSET", KEYS[1], "node", ARGV[1], "epoch", epoch, "expiresAt", ARGV[3])
return epoch`,

  /** KEYS: lease. ARGV: node, epoch, now, expiresAt. Returns 1 if renewed, 0 if lost. */
  lcRenew: `
local lease = redis.call("HMGET", KEYS[1], "node", "epoch", "expiresAt")
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] or tonumber(ARGV[3]) >= tonumber(lease[3]) then
  return 0
end
redis.call("HSET", KEYS[1], "expiresAt", ARGV[4])
return 1`,

  /** KEYS: lease. ARGV: node, epoch. */
  lcRelease: `
local lease = redis.call("HMGET", KEYS[1], "node", "epoch")
if lease[1] == ARGV[1] and lease[2] == ARGV[2] then redis.call("DEL", KEYS[1]) end
return 0`,

  /**
   * KEYS: lease, pages, nonzero index, digest, bucket index, empty index, tombstone index (all of the
   * fence's partition), then one page key per write. ARGV: epoch, now, then per write: page, field, p, n,
   * indexed ("1" or "0"), bucket. Returns 1 if applied, 0 if the fence is stale.
   */
  lcWrite: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1], tonumber(ARGV[2])) then return 0 end
local floor = tonumber(redis.call("HGET", KEYS[4], "hw") or "0")
hw_raised = floor
local touched, durable = {}, {}
for i = 8, #KEYS do
  local a = 2 + (i - 8) * 6
  local page, field, p, n = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local _, existed = merge_entry(KEYS[i], page, ARGV[a + 6], field, p, n, ARGV[a + 5] == "1")
  touched[KEYS[i]] = page
  if not is_presence(field) and (existed or p > 0 or n > 0) then durable[KEYS[i]] = true end
end
apply_digests(KEYS[4])
if hw_raised > floor then redis.call("HSET", KEYS[4], "hw", string.format("%d", hw_raised)) end
for key, page in pairs(touched) do note_emptiness(KEYS[6], key, page, ARGV[2], durable[key]) end
return 1`,

  /**
   * KEYS: lease, pages, nonzero index, digest, bucket index, empty index, tombstone index (all of the
   * fence's partition), then one key per page. ARGV: epoch, now, the indexed field, then per page:
   * page, bucket, entry count, then field, p, n per entry. Returns 0 if the fence is stale, else a
   * list: per page where an entry advanced, its index (1-based, in KEYS order of pages) and its
   * advanced fields and values, flat. A page not in the store whose entries are all presence at zero
   * is left out, and so are a purged counter's remains (page_merge.ts, purgedRemains).
   */
  lcMerge: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1], tonumber(ARGV[2])) then return 0 end
local floor = tonumber(redis.call("HGET", KEYS[4], "hw") or "0")
hw_raised = floor
local purge_floor = tonumber(redis.call("HGET", KEYS[4], "pf") or "0")
local advanced = {}
local a = 3
for i = 8, #KEYS do
  local page, bucket, count = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local first = a + 4
  a = a + 3 + 3 * count
  local skip = redis.call("EXISTS", KEYS[i]) == 0
  for e = first, a, 3 do
    if not skip then break end
    if not is_presence(ARGV[e]) or ARGV[e + 1] ~= ARGV[e + 2] then skip = false end
  end
  if not skip then
    local remains = purged_remains(KEYS[i], first, a, purge_floor)
    local changed, durable = {}, false
    for e = first, a, 3 do
      local field = ARGV[e]
      if not remains[counter_of(field)] then
        local p, n = tonumber(ARGV[e + 1]), tonumber(ARGV[e + 2])
        local value, existed = merge_entry(KEYS[i], page, bucket, field, p, n, field == ARGV[3])
        if value then
          changed[#changed + 1] = field
          changed[#changed + 1] = value
        end
        if not is_presence(field) and (existed or p > 0 or n > 0) then durable = true end
      end
    end
    if #changed > 0 then
      advanced[#advanced + 1] = i - 7
      advanced[#advanced + 1] = changed
    end
    note_emptiness(KEYS[6], KEYS[i], page, ARGV[2], durable)
  end
end
apply_digests(KEYS[4])
if hw_raised > floor then redis.call("HSET", KEYS[4], "hw", string.format("%d", hw_raised)) end
return advanced`,

  /**
   * KEYS: lease, page, idem, pages, digest, bucket index, empty index, tombstone index. ARGV: epoch,
   * now, page, field, counter, delta, payload, expiresAt, keyTtlMs, fingerprint ("" for none), bucket,
   * startAt (where the entry of `field` starts when absent), then a field and a delta per further
   * change. Returns {"applied", p, n, p2, n2, ...} | {"duplicate", payload} |
   * {"conflict"} | {"stale"}.
   */
  lcIncrement: `${LUA_HELPERS}
local now = tonumber(ARGV[2])
if not fence_current(KEYS[1], ARGV[1], now) then return {"stale"} end
local seen = redis.call("HMGET", KEYS[3], "counter", "delta", "payload", "expiresAt", "fingerprint")
if seen[1] and now < tonumber(seen[4]) then
  local same
  if ARGV[10] ~= "" then same = seen[5] == ARGV[10]
  else same = not seen[5] and seen[1] == ARGV[5] and seen[2] == ARGV[6] end
  if same then return {"duplicate", seen[3]} end
  return {"conflict"}
end
local result = {"applied"}
local created = false
local function change(field, delta, start)
  local p, n, existed = read_entry(KEYS[2], field)
  if not existed then p, n = start, start end
  -- An entry started at the floor is stored even when nothing is added, as the op reports it.
  if delta ~= 0 or (not existed and start > 0) then
    local old = existed and format_entry(p, n)
    if delta > 0 then p = p + delta else n = n - delta end
    set_field(KEYS[2], ARGV[3], ARGV[11], field, old, format_entry(p, n), KEYS[8], now)
    if not existed then created = true end
  end
  result[#result + 1] = string.format("%d", p)
  result[#result + 1] = string.format("%d", n)
end
change(ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[12]))
-- The payload's {own} placeholders become this entry's value right after the op (store.ts).
local payload = string.gsub(ARGV[7], "{own}", string.format("%d", tonumber(result[2]) - tonumber(result[3])))
for i = 13, #ARGV, 2 do change(ARGV[i], tonumber(ARGV[i + 1]), 0) end
if created then
  redis.call("ZADD", KEYS[4], 0, ARGV[3])
  redis.call("ZADD", KEYS[6], ARGV[11], ARGV[3])
end
apply_digests(KEYS[5])
-- A durable counter: the page is not empty any more, whatever its value.
redis.call("ZREM", KEYS[7], ARGV[3])
redis.call("HSET", KEYS[3], "counter", ARGV[5], "delta", ARGV[6], "payload", payload, "expiresAt", ARGV[8])
if ARGV[10] ~= "" then redis.call("HSET", KEYS[3], "fingerprint", ARGV[10]) end
redis.call("PEXPIRE", KEYS[3], ARGV[9])
return result`,

  /**
   * KEYS: lease, page, pages, bucket index, empty index. ARGV: epoch, now, page, emptySince. Removes
   * the page if it has been empty since emptySince or earlier and still is: 1 removed, 0 kept, -1 the
   * fence is stale. Its entries are all zero presence: no digest and no non-zero index holds them.
   */
  lcRemoveIfEmpty: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1], tonumber(ARGV[2])) then return -1 end
local since = redis.call("ZSCORE", KEYS[5], ARGV[3])
if not since or tonumber(since) > tonumber(ARGV[4]) then return 0 end
if not page_empty(KEYS[2]) then
  redis.call("ZREM", KEYS[5], ARGV[3])
  return 0
end
redis.call("DEL", KEYS[2])
redis.call("ZREM", KEYS[3], ARGV[3])
redis.call("ZREM", KEYS[4], ARGV[3])
redis.call("ZREM", KEYS[5], ARGV[3])
return 1`,

  /**
   * KEYS: lease, pages, digest, bucket index, empty index, tombstone index (all of the fence's
   * partition), then one key per page. ARGV: epoch, now, deletedBefore, then per page: page, bucket.
   * Purges the page's deleted counters that may go (Store.purgeTombstones) if its tombstones last
   * changed at deletedBefore or earlier. Returns -1 if the fence is stale, else {floor, kept, stay,
   * then per page that lost counters its index (1-based, in KEYS order of pages) and their names}.
   */
  lcPurge: `${LUA_HELPERS}
local now = ARGV[2]
if not fence_current(KEYS[1], ARGV[1], tonumber(now)) then return -1 end
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
   * KEYS: page keys. Returns each page's fields and values, flat, in KEYS order: one command where a
   * pipeline of HGETALLs costs the client one command object and one reply per page.
   */
  lcLoad: `
local pages = {}
for i = 1, #KEYS do pages[i] = redis.call("HGETALL", KEYS[i]) end
return pages`,

  /** KEYS: lease, digest. ARGV: epoch, now, floor. Returns 1 if the floor is at least floor now, 0 if the fence is stale. */
  lcRaisePurgeFloor: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1], tonumber(ARGV[2])) then return 0 end
if tonumber(ARGV[3]) > tonumber(redis.call("HGET", KEYS[2], "pf") or "0") then
  redis.call("HSET", KEYS[2], "pf", ARGV[3])
end
return 1`,

  /** KEYS: lease, digest. ARGV: epoch, now. Returns 1 if marked, 0 if the fence is stale. */
  lcMarkBootstrapped: `${LUA_HELPERS}
if not fence_current(KEYS[1], ARGV[1], tonumber(ARGV[2])) then return 0 end
redis.call("HSET", KEYS[2], "boot", "1")
return 1`,
} as const;

export type ScriptName = keyof typeof SCRIPTS;

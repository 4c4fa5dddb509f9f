/**
 * The Lua the Redis store's entry scripts share (redis_scripts.ts): fence checks, reading and writing
 * entries, digest bookkeeping (digest.ts), the index of empty pages, settled deletes and the
 * tombstone digest (docs/architecture.md, "Purging tombstones"). Each script that uses them runs
 * atomically; the digest changes of one run are applied once at its end (`apply_digests`).
 */
import { LUA_DIGEST, ZERO_DIGEST } from "./digest.js";
import type { Fence } from "./store.js";

/**
 * A fence as the entry scripts take it (`fence_current`): its epoch, then its holder. The epoch is
 * digits, so the first colon ends it whatever the node id holds.
 */
export function fenceArg(fence: Fence): string {
  return `${fence.epoch}:${fence.node}`;
}

/**
 * Writes KEYS[from..] from ARGV[a..] (counter, delta, payload, fingerprint per record) as lcIncrement
 * records them, live until `expires_at`; with `keep_live`, not over a record live at `now`. Returns
 * how many it wrote.
 */
export const WRITE_KEYS = `
local function write_keys(from, a, expires_at, ttl, keep_live, now)
  local written = 0
  for k = from, #KEYS do
    local seen = keep_live and redis.call("HGET", KEYS[k], "expiresAt")
    if not seen or now >= tonumber(seen) then
      redis.call("DEL", KEYS[k])
      redis.call("HSET", KEYS[k], "counter", ARGV[a], "delta", ARGV[a + 1], "payload", ARGV[a + 2], "expiresAt", expires_at)
      if ARGV[a + 3] ~= "" then redis.call("HSET", KEYS[k], "fingerprint", ARGV[a + 3]) end
      redis.call("PEXPIRE", KEYS[k], ttl)
      written = written + 1
    end
    a = a + 4
  end
  return written
end`;

/** Lua shared by the scripts that change entries. */
export const LUA_HELPERS = `${LUA_DIGEST}
local ZERO = "${ZERO_DIGEST}"
-- Whether the fence (fenceArg: "epoch:node") is current: its lease still carries its epoch and
-- its holder. A takeover writes a new epoch and a release deletes the lease, so no clock is
-- needed; a lease that ran out and that nobody took still fences its holder, whose renewal would
-- keep it too (lcRenew). The holder is compared too: a Redis that lost its last second of writes
-- can hand an epoch out twice, to two nodes.
local function fence_current(lease_key, fence)
  local lease = redis.call("HMGET", lease_key, "epoch", "node")
  return lease[1] and lease[2] and lease[1] .. ":" .. lease[2] == fence
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
-- Digest changes of one script run: the entry values XORed into each bucket's digest, kept by
-- parity (a value XORed in twice cancels out), hashed once at the end (apply_digests). An entry a
-- run changes many times (a hot page's counter) costs two hashes, its first and its last value.
-- Each is kept as what its hash is taken of (entry_lanes), so nothing is built twice; a zero
-- presence entry hashes to nothing and is not kept at all.
local toggled = {}
local function toggle(bucket, page, field, value)
  if is_presence(field) and is_zero(value) then return end
  local entries = toggled[bucket]
  if not entries then
    entries = {}
    toggled[bucket] = entries
  end
  local key = page .. "\0" .. field .. "\0" .. value
  if entries[key] then entries[key] = nil else entries[key] = true end
end
-- A nil new_value: the entry was removed.
local function entry_changed(page, bucket, field, old_value, new_value)
  if new_value then toggle(bucket, page, field, new_value) end
  if old_value then toggle(bucket, page, field, old_value) end
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
-- A page whose every entry is a zero presence entry or a visit record: no viewer anywhere, no
-- durable counter.
local function page_empty(page_key)
  local fields = redis.call("HGETALL", page_key)
  if #fields == 0 then return false end
  for i = 1, #fields, 2 do
    if not ((is_presence(fields[i]) and is_zero(fields[i + 1])) or is_visit(fields[i])) then return false end
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
-- tombstone index (every page a tombstone was written to by this release). A group is a counter's
-- and its tombstone's fields and values, read from the page hash; xor_settled XORs its entries into
-- this run's digest changes when the delete is settled, nothing otherwise. Called around a change of
-- one of them: before (count it while it changes) and after (leave it out again if still settled).
local function group_of(fields, counter)
  local tomb = "@del:" .. counter
  local group = {names = {}, values = {}}
  for i = 1, #fields, 2 do
    local c = counter_of(fields[i])
    if c == counter or c == tomb then
      group.names[#group.names + 1] = fields[i]
      group.values[#group.values + 1] = fields[i + 1]
    end
  end
  return group
end
local function xor_settled(page, bucket, group)
  local cvalues, tvalues = {}, {}
  for k, name in ipairs(group.names) do
    if is_tombstone(name) then tvalues[#tvalues + 1] = group.values[k]
    else cvalues[#cvalues + 1] = group.values[k] end
  end
  if #tvalues == 0 or not purgeable_at(cvalues, tvalues) then return end
  for k, name in ipairs(group.names) do entry_changed(page, bucket, name, nil, group.values[k]) end
end
-- A group's field is set to value (added when new).
local function group_set(group, field, value)
  for k, name in ipairs(group.names) do
    if name == field then
      group.values[k] = value
      return
    end
  end
  group.names[#group.names + 1] = field
  group.values[#group.values + 1] = value
end
-- A page enters the tombstone index: every settled delete it holds leaves its digests (it was
-- counted before, as on any page outside the index), and its tombstones from before join the
-- tombstone digest (except field, which the caller counts).
local function settle_page(page_key, page, bucket, field)
  local fields = redis.call("HGETALL", page_key)
  local seen = {}
  for i = 1, #fields, 2 do
    local c = counter_of(fields[i])
    if is_tombstone(c) then
      if fields[i] ~= field then tomb_changed(page, fields[i], false, fields[i + 1]) end
      if not seen[c] then
        seen[c] = true
        xor_settled(page, bucket, group_of(fields, string.sub(c, 6)))
      end
    end
  end
end
-- The deleted counter whose settled state a change of the field may change: its own counter or, for
-- a tombstone, the one it deletes; nil for presence and window buckets.
local function delete_group(field)
  if is_presence(field) or bucket_expiry(field) then return nil end
  local c = counter_of(field)
  if is_tombstone(c) then return string.sub(c, 6) end
  return c
end
-- The partition's index of time buckets by expiry (expiring:{partition}), for the scripts that may
-- write one: they set it before any set_field.
local expiring_key = nil
-- Sets a field of a page hash, keeping digests (settled deletes included), the tombstone index
-- (tombs_key, scored now) and the index of time buckets (expiring_key) current. old is the value it replaces
-- (false when new). A page in the tombstone index is read once, for the group of the field, before
-- the change.
local function set_field(page_key, page, bucket, field, old, value, tombs_key, now)
  if not old then
    local expiry = bucket_expiry(field)
    if expiry then redis.call("ZADD", expiring_key, expiry, page .. "\\0" .. field) end
  end
  local name = delete_group(field)
  local group = nil
  if name and redis.call("ZSCORE", tombs_key, page) then
    group = group_of(redis.call("HGETALL", page_key), name)
    xor_settled(page, bucket, group)
  end
  redis.call("HSET", page_key, field, value)
  entry_changed(page, bucket, field, old, value)
  if is_tombstone(field) then
    -- On a page entering the index, the value replaced was never in the tombstone digest.
    tomb_changed(page, field, (group and old) or false, value)
    redis.call("ZADD", tombs_key, now, page)
    if not group then
      settle_page(page_key, page, bucket, field)
      return
    end
  end
  if group then
    group_set(group, field, value)
    xor_settled(page, bucket, group)
  end
end
-- Max-merges one entry into a page hash, keeping the partition's page list, bucket index, index of
-- non-zero indexed entries, tombstone index and presence floor (hw_raised) current. KEYS of the
-- caller: 2 pages, 3 non-zero index, 5 bucket index, 7 tombstone index; ARGV[2] is now. Returns the
-- entry as stored if it advanced (else nil), whether it existed before, and whether it is zero as
-- stored now (nil when the field is an expired time bucket, left out).
local hw_raised = 0
-- Pages of this script run already in the partition's page list and bucket index: once per page.
local listed = {}
-- A time bucket no read reaches any more (at now, ARGV[2]): the store removed it or will.
local function expired(field)
  local expiry = bucket_expiry(field)
  return expiry ~= nil and expiry <= tonumber(ARGV[2])
end
local function merge_entry(page_key, page, bucket, field, p, n, indexed)
  -- Left out, as if it never came.
  if expired(field) then return nil, false, nil end
  local old_p, old_n, existed = read_entry(page_key, field)
  local new_p, new_n = math.max(p, old_p), math.max(n, old_n)
  local value = nil
  if p > old_p or n > old_n then
    value = format_entry(new_p, new_n)
    set_field(page_key, page, bucket, field, existed and format_entry(old_p, old_n), value, KEYS[7], ARGV[2])
    if not existed and not listed[page] then
      redis.call("ZADD", KEYS[2], 0, page)
      redis.call("ZADD", KEYS[5], bucket, page)
      listed[page] = true
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
  return value, existed, new_p == new_n
end
-- Whether the field is a unique-visitor register's ("@u:{day}:{register}\\0{dc}", a time bucket):
-- never a tombstone, in no deleted counter's group, so merge_registers may take it (unless the
-- write asks for it to be indexed, which only presence entries do).
local function is_register(field)
  return string.sub(field, 1, 3) == "@u:" and bucket_expiry(field) ~= nil
end
-- Registers merged per redis.call: HMGET, HSET and ZADD take this many fields each.
local REGISTERS_PER_CALL = 500
-- Max-merges a page's unique-visitor registers (regs: field, p, n, ...) as merge_entry would, one
-- by one, but in three calls per REGISTERS_PER_CALL registers instead of three per register: a
-- flush's registers are most of its entries, and a call costs more than the Lua around it.
local function merge_registers(page_key, page, bucket, regs)
  for first = 1, #regs, 3 * REGISTERS_PER_CALL do
    -- The chunk's registers, each once (a field written twice counts by its largest p and n).
    local names, ps, ns = {}, {}, {}
    for i = first, math.min(#regs, first + 3 * REGISTERS_PER_CALL - 1), 3 do
      local field = regs[i]
      if not expired(field) then
        if ps[field] == nil then
          names[#names + 1] = field
          ps[field], ns[field] = regs[i + 1], regs[i + 2]
        else
          ps[field], ns[field] = math.max(ps[field], regs[i + 1]), math.max(ns[field], regs[i + 2])
        end
      end
    end
    if #names > 0 then
      local olds = redis.call("HMGET", page_key, unpack(names))
      local sets, adds = {}, {}
      for j, field in ipairs(names) do
        local p, n, old = ps[field], ns[field], olds[j]
        local old_p, old_n = 0, 0
        if old then
          local sp, sn = string.match(old, "^(%d+):(%d+)$")
          old_p, old_n = tonumber(sp), tonumber(sn)
        end
        if p > old_p or n > old_n then
          local value = format_entry(math.max(p, old_p), math.max(n, old_n))
          sets[#sets + 1] = field
          sets[#sets + 1] = value
          entry_changed(page, bucket, field, old and format_entry(old_p, old_n), value)
          if not old then
            adds[#adds + 1] = bucket_expiry(field)
            adds[#adds + 1] = page .. "\\0" .. field
          end
        end
      end
      if #sets > 0 then redis.call("HSET", page_key, unpack(sets)) end
      if #adds > 0 then
        redis.call("ZADD", expiring_key, unpack(adds))
        if not listed[page] then
          redis.call("ZADD", KEYS[2], 0, page)
          redis.call("ZADD", KEYS[5], bucket, page)
          listed[page] = true
        end
      end
    end
  end
end
-- The counters (with their tombstones) of an incoming record, args[first..last] as field, p, n
-- (numbers), that are a purged counter's remains (page_merge.ts, purgedRemains), as a set.
local function purged_remains(page_key, args, first, last, floor)
  local remains, values, has_tomb = {}, {}, false
  -- Most records hold no tombstone: nothing to build then.
  for e = first, last, 3 do
    if is_tombstone(args[e]) then has_tomb = true end
  end
  if not has_tomb then return remains end
  for e = first, last, 3 do
    local counter = counter_of(args[e])
    values[counter] = values[counter] or {}
    table.insert(values[counter], string.format("%d:%d", args[e + 1], args[e + 2]))
  end
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
  for bucket, entries in pairs(toggled) do
    local hi, lo = 0, 0
    for hashed in pairs(entries) do
      local h, l = digest_lanes(redis.sha1hex(hashed))
      hi, lo = bit.bxor(hi, h), bit.bxor(lo, l)
    end
    if hi ~= 0 or lo ~= 0 then
      xor_stored(digest_key, "b" .. bucket, hi, lo)
      all_hi, all_lo = bit.bxor(all_hi, hi), bit.bxor(all_lo, lo)
    end
  end
  if all_hi ~= 0 or all_lo ~= 0 then xor_stored(digest_key, "all", all_hi, all_lo) end
  if tomb_hi ~= 0 or tomb_lo ~= 0 then xor_stored(digest_key, "t", tomb_hi, tomb_lo) end
end
`;

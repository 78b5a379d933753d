#!lua name=dtq
--[[
dtq Functions library. Every state transition of a task happens in one of these
functions, atomically. The build assembles the library (cmake/lua_library.cmake) from this
head and the modules listed in CMakeLists.txt (DTQ_LUA_MODULES), in that order:
- lua/lib/*.lua, the shared pieces, each a table (util, scope, call, ...) that later
  modules read what they need from;
- lua/fn/*.lua, the Functions, each registering its own with call.reg.
Each module runs in its own function scope (the wrapper `define(function() ... end)`), so
its locals are its own: the main chunk holds this head's names and one table per lib
module. A line of the assembled text maps back to its module by the marker comment on the
wrapper's line (scripts/lua-where). The daemon loads the assembled text with FUNCTION LOAD
REPLACE after replacing the namespace line below, so `<ns>_enqueue` and friends exist per
namespace.

Conventions:
- errors are error replies whose first word is a stable code (INVALID_ARGUMENT, NOT_FOUND,
  WRONG_STATE, PAYLOAD_TOO_LARGE, QUEUE_FULL, IDEMPOTENCY_IN_PROGRESS, ID_EXISTS);
- every time comes from the server clock (TIME), never from a caller;
- numbers are written with %d: tostring() would turn epoch ms into 1.7e+12;
- per-call state lives in call.ctx, a table made afresh by the wrapper of every Function
  (lib/call.lua); what a module keeps across calls is a memo of pure answers, bounded.
The constants the C side owns are not written here: scripts.c replaces the placeholder line
below with the table CONST at load (this text alone is refused: it reads a global that is
not there). CONST.GROUP is the consumer group of every stream; BANDS the priorities
0..BANDS-1 (BAND_NAMES their stream suffixes); MAX_ATTEMPTS the cap on max_attempts;
TERMINAL the set of terminal statuses (task.c); DEFAULTS, CONFIG_BOUNDS and CONFIG_NAMES the
fields of <prefix>:config (config.c); NAME_MAX, TASK_ID_MAX and IDEMPOTENCY_KEY_MAX the
bounds of names, task ids and idempotency keys (keys.h).
]]
local NS, PREFIX = 'dtq', 'dtq' -- replaced at load time (scripts.c)
local VERSION = 'unversioned' -- replaced at load time: <DTQ_VERSION>-<hash of the text>
local CONST = load_with_dtqctl_functions_install

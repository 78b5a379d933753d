# Assembles the Functions library: cmake -DHEAD=lua/dtq.lua -DDIR=lua -DMODULES=lib/util,...,fn/x
# -DOUT=file -P lua_library.cmake. After the head come the lib modules' tables (declared
# first, assigned in order) and every module in its own function scope; the wrapper's
# line names the module (the marker scripts/lua-where maps Redis's line numbers back by).
string(REPLACE "," ";" MODULES "${MODULES}")
file(READ ${HEAD} text)
set(tables "")
foreach(m ${MODULES})
  if(m MATCHES "^lib/(.+)$")
    list(APPEND tables ${CMAKE_MATCH_1})
  endif()
endforeach()
string(REPLACE ";" ", " tables_list "${tables}")
string(APPEND text "\n-- @generated cmake/lua_library.cmake\n"
  "-- The lib modules' tables (lua/lib), assigned below in this order; the Functions (lua/fn)\n"
  "-- register themselves and keep no table.\nlocal ${tables_list}\n"
  "local function define(body) return body() end\n")
foreach(m ${MODULES})
  file(READ ${DIR}/${m}.lua body)
  if(m MATCHES "^lib/(.+)$")
    string(APPEND text "\n${CMAKE_MATCH_1} = define(function() -- @module lua/${m}.lua\n${body}end)\n")
  else()
    string(APPEND text "\ndefine(function() -- @module lua/${m}.lua\n${body}end)\n")
  endif()
endforeach()
file(WRITE ${OUT}.tmp "${text}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)

# Turns a text file into a C byte array: cmake -DIN=file -DOUT=file.c -DSYMBOL=name -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* Generated from ${IN} by cmake/embed.cmake; do not edit. */\n#include <stddef.h>\n"
  "const unsigned char ${SYMBOL}[] = {${bytes}0x00};\nconst size_t ${SYMBOL}_len = ${len};\n")

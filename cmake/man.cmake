# Builds one man page: IN (Markdown, @DTQ_VERSION@ replaced by VERSION) through MD2MAN
# (go-md2man) into OUT, gzipped as Debian ships man pages (gzip -9n: no name, no time).
file(READ ${IN} text)
string(REPLACE "@DTQ_VERSION@" "${VERSION}" text "${text}")
file(WRITE ${OUT}.md "${text}")
execute_process(COMMAND ${MD2MAN} -in ${OUT}.md -out ${OUT}.roff RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${MD2MAN} failed on ${IN}")
endif()
execute_process(COMMAND gzip -9n -c ${OUT}.roff OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip failed on ${OUT}.roff")
endif()
file(REMOVE ${OUT}.md ${OUT}.roff)

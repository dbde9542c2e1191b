/* A program built against an installed ember (tests/c/check_install.sh): the library it loaded must be the
   version of the header it was compiled with (EMBER_VERSION_* against engine_version()). */
#include <stdio.h>
#include <string.h>

#include <ember.h>

int main(void) {
    char header[32];
    snprintf(header, sizeof header, "%d.%d.%d", EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR, EMBER_VERSION_PATCH);
    const char *library = engine_version();
    printf("header %s, library %s, status 0: %s\n", header, library, engine_status_message(EMBER_STATUS_OK));
    return strcmp(header, library) == 0 ? 0 : 1;
}

/* Linked into every C test that crates/weft-capi/tests/c_api.rs builds with
 * -fsanitize=address. Before main, it names on stderr the libweft.so this process really
 * loaded (found through one of its symbols) and whether AddressSanitizer's runtime is in
 * the process, so that the harness can check that the test ran against the
 * AddressSanitizer build of libweft and not another libweft.so found first on the
 * library path. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

__attribute__((constructor)) static void weft_asan_probe(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "ConvertThreadToFiber");
    void *asan = dlsym(RTLD_DEFAULT, "__asan_init");
    if (sym == NULL || dladdr(sym, &info) == 0 || info.dli_fname == NULL) {
        fprintf(stderr, "weft-asan-probe: libweft not found\n");
        return;
    }
    fprintf(stderr, "weft-asan-probe: asan=%s libweft=%s\n", asan != NULL ? "yes" : "no",
            info.dli_fname);
}

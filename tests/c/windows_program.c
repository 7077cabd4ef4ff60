/*
 * A Windows fiber program, written against the Win32 API and compiled here
 * unchanged except for the include line. It follows the shape of the
 * "Using Fibers" sample in the Windows documentation: a primary fiber, a
 * read fiber and a write fiber pass a buffer back and forth until a
 * source is copied, with fiber-local storage holding per-fiber statistics
 * that an FLS callback reports and frees.
 *
 * It is also valid C++ and is compiled as C99 and as C++11 by the tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/fibers.h> /* was: #include <windows.h> */

#define BUFFER_SIZE 37
#define FIBER_COUNT 3
#define PRIMARY_FIBER 0
#define READ_FIBER 1
#define WRITE_FIBER 2

typedef struct {
    DWORD dwParameter;
    DWORD dwFiberResultCode;
    const char *pSource;
    SIZE_T cbSource;
    SIZE_T cbRead;
    char *pDest;
    SIZE_T cbWritten;
    char *lpBuffer;
    DWORD dwBytesInBuffer;
} FIBERDATASTRUCT, *PFIBERDATASTRUCT, *LPFIBERDATASTRUCT;

typedef struct {
    const char *name;
    DWORD dwSwitches;
} FIBERSTATS, *PFIBERSTATS;

VOID WINAPI ReadFiberFunc(LPVOID lpParameter);
VOID WINAPI WriteFiberFunc(LPVOID lpParameter);
VOID WINAPI FlsCleanup(PVOID lpFlsData);

LPVOID g_lpFiber[FIBER_COUNT];
LPFIBERDATASTRUCT g_lpFiberData;
DWORD g_dwFlsIndex = FLS_OUT_OF_INDEXES;
DWORD g_dwCleanups = 0;
DWORD g_dwTotalSwitches = 0;

static const char g_szSource[] =
    "Fibers are a lightweight unit of execution that must be manually "
    "scheduled by the application. A fiber runs in the context of the "
    "threads that schedule it; each thread can schedule multiple fibers. "
    "In general, fibers do not provide advantages over a well-designed "
    "multithreaded application, but they make it easier to port "
    "applications that were designed to schedule their own threads.";

static BOOL InitFiberStats(const char *name) {
    PFIBERSTATS pStats = (PFIBERSTATS)malloc(sizeof(FIBERSTATS));
    if (pStats == NULL) {
        return FALSE;
    }
    pStats->name = name;
    pStats->dwSwitches = 0;
    return FlsSetValue(g_dwFlsIndex, pStats);
}

static VOID CountSwitch(VOID) {
    PFIBERSTATS pStats = (PFIBERSTATS)FlsGetValue(g_dwFlsIndex);
    if (pStats != NULL) {
        pStats->dwSwitches++;
    }
}

VOID WINAPI FlsCleanup(PVOID lpFlsData) {
    PFIBERSTATS pStats = (PFIBERSTATS)lpFlsData;
    printf("%s fiber switched %d times\n", pStats->name, pStats->dwSwitches);
    g_dwTotalSwitches += pStats->dwSwitches;
    g_dwCleanups++;
    free(pStats);
}

int main(void) {
    LPFIBERDATASTRUCT fs;
    int iResult = 0;

    g_dwFlsIndex = FlsAlloc(FlsCleanup);
    if (g_dwFlsIndex == FLS_OUT_OF_INDEXES) {
        printf("FlsAlloc error (%d)\n", GetLastError());
        return 1;
    }

    fs = (LPFIBERDATASTRUCT)malloc(sizeof(FIBERDATASTRUCT) * FIBER_COUNT);
    if (fs == NULL) {
        printf("malloc error\n");
        return 1;
    }
    memset(fs, 0, sizeof(FIBERDATASTRUCT) * FIBER_COUNT);
    g_lpFiberData = fs;

    char *lpBuffer = (char *)malloc(BUFFER_SIZE);
    char *lpDest = (char *)malloc(sizeof(g_szSource));
    if (lpBuffer == NULL || lpDest == NULL) {
        printf("malloc error\n");
        return 1;
    }

    g_lpFiber[PRIMARY_FIBER] = ConvertThreadToFiber(&fs[PRIMARY_FIBER]);
    if (g_lpFiber[PRIMARY_FIBER] == NULL) {
        printf("ConvertThreadToFiber error (%d)\n", GetLastError());
        return 1;
    }
    if (!InitFiberStats("primary")) {
        printf("FlsSetValue error (%d)\n", GetLastError());
        return 1;
    }

    fs[PRIMARY_FIBER].dwParameter = 0;
    fs[PRIMARY_FIBER].dwFiberResultCode = 0;

    fs[READ_FIBER].dwParameter = 0x12345678;
    fs[READ_FIBER].pSource = g_szSource;
    fs[READ_FIBER].cbSource = strlen(g_szSource);
    fs[READ_FIBER].lpBuffer = lpBuffer;

    g_lpFiber[READ_FIBER] = CreateFiber(0, ReadFiberFunc, &fs[READ_FIBER]);
    if (g_lpFiber[READ_FIBER] == NULL) {
        printf("CreateFiber error (%d)\n", GetLastError());
        return 1;
    }

    fs[WRITE_FIBER].dwParameter = 0x54545454;
    fs[WRITE_FIBER].pDest = lpDest;
    fs[WRITE_FIBER].lpBuffer = lpBuffer;

    g_lpFiber[WRITE_FIBER] =
        CreateFiberEx(16 * 1024, 64 * 1024, FIBER_FLAG_FLOAT_SWITCH, WriteFiberFunc,
                      &fs[WRITE_FIBER]);
    if (g_lpFiber[WRITE_FIBER] == NULL) {
        printf("CreateFiberEx error (%d)\n", GetLastError());
        return 1;
    }

    /* Start the read fiber; it returns here when the copy is done. */
    CountSwitch();
    SwitchToFiber(g_lpFiber[READ_FIBER]);

    printf("ReadFiber: result code is %d, %d bytes processed\n",
           fs[READ_FIBER].dwFiberResultCode, (int)fs[READ_FIBER].cbRead);
    printf("WriteFiber: result code is %d, %d bytes processed\n",
           fs[WRITE_FIBER].dwFiberResultCode, (int)fs[WRITE_FIBER].cbWritten);

    if (fs[READ_FIBER].dwFiberResultCode != 0 || fs[WRITE_FIBER].dwFiberResultCode != 0) {
        iResult = 1;
    }
    if (fs[WRITE_FIBER].cbWritten != strlen(g_szSource) ||
        memcmp(lpDest, g_szSource, strlen(g_szSource)) != 0) {
        printf("copy mismatch\n");
        iResult = 1;
    }
    if (GetFiberData() != &fs[PRIMARY_FIBER] || GetCurrentFiber() != g_lpFiber[PRIMARY_FIBER] ||
        !IsThreadAFiber()) {
        printf("primary fiber state is wrong\n");
        iResult = 1;
    }

    DeleteFiber(g_lpFiber[READ_FIBER]);
    DeleteFiber(g_lpFiber[WRITE_FIBER]);
    if (g_dwCleanups != 2) {
        printf("expected 2 FLS cleanups after DeleteFiber, got %d\n", g_dwCleanups);
        iResult = 1;
    }

    if (!ConvertFiberToThread()) {
        printf("ConvertFiberToThread error (%d)\n", GetLastError());
        iResult = 1;
    }
    /* The thread keeps the primary fiber's value; FlsFree reports it. */
    if (g_dwCleanups != 2) {
        printf("expected 2 FLS cleanups after ConvertFiberToThread, got %d\n", g_dwCleanups);
        iResult = 1;
    }
    if (!FlsFree(g_dwFlsIndex)) {
        printf("FlsFree error (%d)\n", GetLastError());
        iResult = 1;
    }
    if (g_dwCleanups != 3) {
        printf("expected 3 FLS cleanups after FlsFree, got %d\n", g_dwCleanups);
        iResult = 1;
    }
    printf("%d switches in all\n", g_dwTotalSwitches);

    free(lpBuffer);
    free(lpDest);
    free(fs);
    if (iResult == 0) {
        printf("windows_program: all checks passed\n");
    }
    return iResult;
}

VOID WINAPI ReadFiberFunc(LPVOID lpParameter) {
    LPFIBERDATASTRUCT fds = (LPFIBERDATASTRUCT)lpParameter;

    if (fds == NULL || fds != (LPFIBERDATASTRUCT)GetFiberData()) {
        printf("Passed NULL or wrong fiber data\n");
        exit(1);
    }
    if (!InitFiberStats("read")) {
        printf("FlsSetValue error (%d)\n", GetLastError());
        exit(1);
    }
    printf("Read fiber (dwParameter is 0x%x)\n", fds->dwParameter);

    fds->cbRead = 0;
    fds->dwFiberResultCode = 0;
    for (;;) {
        SIZE_T cbLeft = fds->cbSource - fds->cbRead;
        DWORD dwBytes = (DWORD)(cbLeft < BUFFER_SIZE ? cbLeft : BUFFER_SIZE);
        if (dwBytes == 0) {
            break;
        }
        memcpy(fds->lpBuffer, fds->pSource + fds->cbRead, dwBytes);
        fds->cbRead += dwBytes;
        g_lpFiberData[WRITE_FIBER].dwBytesInBuffer = dwBytes;
        CountSwitch();
        SwitchToFiber(g_lpFiber[WRITE_FIBER]);
    }

    CountSwitch();
    SwitchToFiber(g_lpFiber[PRIMARY_FIBER]);
}

VOID WINAPI WriteFiberFunc(LPVOID lpParameter) {
    LPFIBERDATASTRUCT fds = (LPFIBERDATASTRUCT)lpParameter;

    if (fds == NULL || fds != (LPFIBERDATASTRUCT)GetFiberData()) {
        printf("Passed NULL or wrong fiber data\n");
        exit(1);
    }
    if (!InitFiberStats("write")) {
        printf("FlsSetValue error (%d)\n", GetLastError());
        exit(1);
    }
    printf("Write fiber (dwParameter is 0x%x)\n", fds->dwParameter);

    fds->cbWritten = 0;
    fds->dwFiberResultCode = 0;
    for (;;) {
        memcpy(fds->pDest + fds->cbWritten, fds->lpBuffer, fds->dwBytesInBuffer);
        fds->cbWritten += fds->dwBytesInBuffer;
        CountSwitch();
        SwitchToFiber(g_lpFiber[READ_FIBER]);
    }
}

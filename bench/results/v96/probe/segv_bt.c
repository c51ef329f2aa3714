// v96 probe: LD_PRELOAD'ed SIGSEGV / SIGABRT reporter (no gdb on the GPU machine): the faulting RIP, a backtrace with
// each frame's module and offset in it (dladdr), and the mappings of the extension, so the frames can be symbolised
// on another machine with addr2line against the same .so.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void report(int sig, siginfo_t* info, void* ctx) {
  ucontext_t* uc = (ucontext_t*)ctx;
  void* rip = (void*)uc->uc_mcontext.gregs[REG_RIP];
  fprintf(stderr, "\n=== segv_bt: signal %d, fault address %p, rip %p\n", sig, info->si_addr, rip);
  void* frames[64];
  int n = backtrace(frames, 64);
  void* all[65];
  all[0] = rip;
  for (int i = 0; i < n; ++i) all[i + 1] = frames[i];
  for (int i = 0; i < n + 1; ++i) {
    Dl_info d;
    if (dladdr(all[i], &d) && d.dli_fname)
      fprintf(stderr, "#%02d %p %s +0x%lx %s\n", i, all[i], d.dli_fname,
              (unsigned long)((char*)all[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "");
    else
      fprintf(stderr, "#%02d %p ?\n", i, all[i]);
  }
  fflush(stderr);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = report;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}

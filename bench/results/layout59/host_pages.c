/* Random 256-byte rows (prefetched in sets of 148, then copied) from a region of MB MiB, guest huge pages
 * (madvise) or not (NOHP=1): if the region size matters and the guest pages do not, the hypervisor backs the
 * guest with small pages. gcc -O2 -march=native host_pages.c -o host_pages; ./host_pages MB 0 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint64_t rs=88172645463325252ull; static uint64_t xr(void){rs^=rs<<13;rs^=rs>>7;rs^=rs<<17;return rs;}
int main(int argc,char**argv){
  size_t mb=atol(argv[1]); int mode=atoi(argv[2]); int win=argc>3?atoi(argv[3]):148;
  size_t bytes=mb<<20; unsigned char*buf=mmap(NULL,bytes,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(buf,bytes,getenv("NOHP")?MADV_NOHUGEPAGE:MADV_HUGEPAGE); memset(buf,1,bytes);
  size_t nrows=bytes/256; int sets=20000, n=148;
  int *idx=malloc(sizeof(int)*n*sets); for(long i=0;i<(long)n*sets;i++) idx[i]=xr()%nrows;
  unsigned char dst[32768] __attribute__((aligned(64))); double sum=0; double t0=now();
  for(int s=0;s<sets;s++){ int *id=idx+(size_t)s*n;
    if(mode==0){ for(int j=0;j<n;j++) for(int o=0;o<256;o+=64) __builtin_prefetch(buf+(size_t)id[j]*256+o,0,3);
      for(int j=0;j<n;j++){ memcpy(dst+(j%128)*256,buf+(size_t)id[j]*256,256);} }
    else { /* sliding window over the concatenated sequence */
      for(int j=0;j<n;j++){ long jj=(long)s*n+j+win; if(jj<(long)n*sets) for(int o=0;o<256;o+=64) __builtin_prefetch(buf+(size_t)idx[jj]*256+o,0,3);
        memcpy(dst+(j%128)*256,buf+(size_t)id[j]*256,256);} }
    sum+=dst[5];
  }
  double t=now()-t0; printf("%zu MB mode %d win %d: %.2f us per set of %d rows, %.2f GB/s (%g)\n",mb,mode,win,t*1e6/sets,n,(double)n*256*sets/t/1e9,sum);
}

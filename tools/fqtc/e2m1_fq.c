/* decode_sm90.cu fq_e2m1_mag / fq_nvfp4_code (helper fqkn): the magic-add E2M1 rounding equals
 * quant.cuh e2m1_mag for all 2^31 patterns >= +0 (NaN included), and the new element equals the
 * previous select form for every bf16 / fp16 x against all E4M3 block scales at 7 global scales.
 * make -C tools/fqtc e2m1_fq && tools/fqtc/e2m1_fq (exit 0: no mismatch). */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
static float u2f(uint32_t u){float f;memcpy(&f,&u,4);return f;}
static uint32_t f2u(float f){uint32_t u;memcpy(&u,&f,4);return u;}
static float e2m1_mag(float a){ if(a<=0.25f)return 0.f; if(a<0.75f)return .5f; if(a<=1.25f)return 1.f;
 if(a<1.75f)return 1.5f; if(a<=2.5f)return 2.f; if(a<3.5f)return 3.f; if(a<=5.f)return 4.f; return 6.f;}
static float e2m1_new(float q){ uint32_t e=f2u(q)>>23; e = e<127?127:e; e = e>129?129:e;
 volatile float M=u2f((e<<23)+((22u<<23)|0x400000u)); volatile float t=q+M; volatile float r=t-M; return fminf(r,6.f);}
/* old element, decode_sm90.cu fq_nvfp4_code */
static float e2m1_fast(float a){uint32_t u=f2u(a); u=(u+0x1fffffu+((u>>22)&1u))&0xffc00000u;
 return a<1.f? rintf(a*2.f)*0.5f : (a<6.f? u2f(u):6.f);}
static float old_code(float x,float sc,float sb,float rsb){float a=fabsf(x),q0=a*rsb; float q1=fmaf(fmaf(-q0,sb,a),rsb,q0);
 float r=e2m1_fast(q0==INFINITY?q0:q1)*sc; return u2f(f2u(r)|(f2u(x)&0x80000000u));}
static float new_code(float x,float sc,float sb,float rsb){float a=fabsf(x),q0=a*rsb; float q1=fmaf(fmaf(-q0,sb,a),rsb,q0);
 float r=e2m1_new(q1)*sc; return u2f(f2u(r)|(f2u(x)&0x80000000u));}
int main(){ long bad=0;
 for(uint64_t u=0;u<=0x7fffffffu;u++){float a=u2f((uint32_t)u); if(f2u(e2m1_mag(a))!=f2u(e2m1_new(a))){ if(bad<5)printf("bad %08x %g %g %g\n",(unsigned)u,a,e2m1_mag(a),e2m1_new(a)); bad++;}}
 printf("e2m1_new vs e2m1_mag over 2^31 patterns >= +0 (NaN included): %ld mismatches\n",bad);
 /* elements: every 16-bit (bf16 and fp16) x against block scales from E4M3 codes x gs */
 long bad2=0,n=0; float gss[]={1.f,4.f/2688.f,1.f/2688.f,0x1p-100f,3.7f,1e-3f,0.015625f};
 for(int g=0;g<7;g++) for(int c=0;c<256;c++){ uint32_t cb=c; /* e4m3 code -> value */
   int s=(cb>>7)&1,ex=(cb>>3)&15,m=cb&7; if(s)continue; if(ex==15&&m==7)continue;
   float sc= ex? ldexpf(1.f+m/8.f,ex-7): ldexpf(m/8.f,-6); float sb=sc*gss[g]; float rsb=1.f/sb;
   for(uint32_t h=0;h<65536;h++){ float xs[2]; xs[0]=u2f(h<<16); 
     /* fp16 */ uint16_t hh=h; int hs=hh>>15,he=(hh>>10)&31,hm=hh&1023; xs[1]= he==31? (hm?NAN:(hs?-INFINITY:INFINITY)) : (hs?-1:1)*(he? ldexpf(1+hm/1024.f,he-15): ldexpf(hm/1024.f,-14));
     for(int k=0;k<2;k++){ n++; float o=old_code(xs[k],sc,sb,rsb), w=new_code(xs[k],sc,sb,rsb);
       if(f2u(o)!=f2u(w) && !(isnan(o)&&isnan(w))){ if(bad2<5)printf("elem bad x %g sc %g sb %g: %g %g\n",xs[k],sc,sb,o,w); bad2++;}}}}
 printf("elements old vs new: %ld of %ld mismatch\n",bad2,n);
 return bad||bad2; }

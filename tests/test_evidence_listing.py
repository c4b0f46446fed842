"""peakbench.evidence.listing: opcodes counted with their modifiers in SASS and AMDGCN listings, and one
kernel cut out of a module's listing."""
from __future__ import annotations

from peakbench.evidence import listing

LISTING = """
        Function : alu
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0150*/               @!P0 HFMA2.MMA R4, R4, R2, R5 ;                   /* 0x000000020404a235 */
        /*0160*/                   HFMA2 R6, R6, R2, R5 ;                       /* 0x0000000206067231 */
        /*0170*/                   HFMA2 R7, R7, R2, R5 ;                       /* 0x0000000207077231 */
        /*0180*/                   HGMMA.64x256x16.F32 R24, gdesc[UR4], R24 ;   /* 0x00000000181879f0 */
        /*0190*/                   EXIT ;                                       /* 0x000000000000794d */
"""


def test_sass_opcodes_are_counted_with_their_modifiers():
    mix = listing.instruction_mix(LISTING)
    assert mix == {"HFMA2": 2, "LDC": 1, "HFMA2.MMA": 1, "HGMMA.64x256x16.F32": 1, "EXIT": 1}
    assert next(iter(mix)) == "HFMA2"                                   # the most frequent first
    assert listing.count(LISTING, "HFMA2") == 3
    assert listing.count(LISTING, "HGMMA") == 1
    assert listing.count(LISTING, "FFMA") == 0


def test_a_kernel_is_cut_out_of_a_module_listing():
    module = ("\t\tFunction : empty\n        /*0000*/                   EXIT ;\n"
              "\t\tFunction : chase\n        /*0000*/                   LDG.E.STRONG.SM R2, desc[UR4][R2.64] ;\n"
              "        /*0010*/                   EXIT ;\n")
    assert listing.instruction_mix(listing.function(module, "chase")) == {"LDG.E.STRONG.SM": 1, "EXIT": 1}
    assert listing.instruction_mix(listing.function(module, "empty")) == {"EXIT": 1}
    assert listing.function(module, "stream") == ""
    assert listing.instruction_mix(listing.function(LISTING, "alu")) == listing.instruction_mix(LISTING)
    bare = "        /*0000*/                   EXIT ;\n"
    assert listing.function(bare, "alu") == bare                  # no function names: all of it


def test_amdgcn_listings_are_counted_too():
    text = "  v_pk_fma_f16 v1, v2, v3, v4 // 0000001C: CC0E0001\n  v_pk_fma_f16 v5, v2, v3, v4\n  s_endpgm\n"
    assert listing.instruction_mix(text) == {"v_pk_fma_f16": 2, "s_endpgm": 1}

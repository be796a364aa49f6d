// otpu_fp_pkg: the small fp32 helpers of otpu_core/fp32.py that need no adder or multiplier
// (flush, canonical NaN, the total-order key, max/min, abs, f2i, floor) and the constants of the
// composite sequences. Every value is a 32-bit IEEE binary32 bit pattern.
package otpu_fp_pkg;
  localparam logic [31:0] CANON_NAN = 32'h7FC00000;
  localparam logic [31:0] POS_INF   = 32'h7F800000;
  localparam logic [31:0] NEG_INF   = 32'hFF800000;
  localparam logic [31:0] ONE       = 32'h3F800000;
  localparam logic [31:0] TWO       = 32'h40000000;
  localparam logic [31:0] HALF      = 32'h3F000000;
  localparam logic [31:0] THREE_HALVES = 32'h3FC00000;
  localparam logic [31:0] MINUS_ONE = 32'hBF800000;
  localparam logic [31:0] INV127    = 32'h3C010204;   // fp32(1/127)
  localparam logic [31:0] F127      = 32'h42FE0000;   // 127.0
  localparam logic [31:0] RECIP_SEED = 32'h7EF311C3;
  localparam logic [31:0] RSQRT_SEED = 32'h5F3759DF;
  localparam logic [22:0] LOG2_SQRT2_MANT = 23'h3504F3;

  // 2^f on [0, 1): C0..C7 (fp32.EXP2_COEFFS)
  function automatic logic [31:0] exp2_c(input int k);
    case (k)
      0: return 32'h3F800000; 1: return 32'h3F317218; 2: return 32'h3E75FDE9; 3: return 32'h3D63593E;
      4: return 32'h3C1D8534; 5: return 32'h3AAFE2F6; 6: return 32'h3916C07C; default: return 32'h37B3C7D6;
    endcase
  endfunction

  // log2(1 + t) / t: C1..C9 (fp32.LOG2_COEFFS), k = 1..9
  function automatic logic [31:0] log2_c(input int k);
    case (k)
      1: return 32'h3FB8AA3B; 2: return 32'hBF38AA38; 3: return 32'h3EF639EB; 4: return 32'hBEB8AE27;
      5: return 32'h3E9369C2; 6: return 32'hBE74ADF2; 7: return 32'h3E5CE48E; 8: return 32'hBE543E8E;
      default: return 32'h3E00DB73;
    endcase
  endfunction

  function automatic logic is_nan(input logic [31:0] x);
    return x[30:23] == 8'hFF && x[22:0] != 0;
  endfunction

  // denormals become a zero of their sign; everything else keeps its bits (NaN included)
  function automatic logic [31:0] ftz(input logic [31:0] x);
    return x[30:23] == 0 ? {x[31], 31'd0} : x;
  endfunction

  function automatic logic [31:0] canon(input logic [31:0] x);
    return is_nan(x) ? CANON_NAN : x;
  endfunction

  // total-order key of a flushed value: compare keys unsigned
  function automatic logic [31:0] key_of(input logic [31:0] x);
    return x[31] ? ~x : (x | 32'h80000000);
  endfunction

  function automatic logic gt(input logic [31:0] a, input logic [31:0] b);
    return key_of(ftz(a)) > key_of(ftz(b));
  endfunction

  function automatic logic [31:0] fmax(input logic [31:0] a, input logic [31:0] b);
    logic [31:0] fa, fb;
    fa = ftz(a); fb = ftz(b);
    return key_of(fa) > key_of(fb) ? fa : fb;
  endfunction

  function automatic logic [31:0] fmin(input logic [31:0] a, input logic [31:0] b);
    logic [31:0] fa, fb;
    fa = ftz(a); fb = ftz(b);
    return key_of(fb) > key_of(fa) ? fa : fb;
  endfunction

  function automatic logic [31:0] fabs(input logic [31:0] x);
    logic [31:0] f;
    f = ftz(x);
    return {1'b0, f[30:0]};
  endfunction

  // fp32 -> 32-bit register value, truncating toward zero (RLD)
  function automatic logic [31:0] f2i(input logic [31:0] x);
    logic [7:0] e;
    logic [31:0] m, v;
    e = x[30:23];
    m = {8'd0, 1'b1, x[22:0]};
    if (e < 127) return 32'd0;
    if (e >= 158) return 32'h80000000;
    v = e >= 150 ? m << (e - 150) : m >> (150 - e);
    return x[31] ? -v : v;
  endfunction

  // floor of a flushed fp32 in [-126, 128) as a signed integer (exp2's integer part)
  function automatic logic signed [8:0] floor_small(input logic [31:0] x);
    logic [7:0] e;
    logic [23:0] m;
    logic [7:0] ip;
    logic frac;
    e = x[30:23];
    m = {1'b1, x[22:0]};
    if (e < 127) begin
      ip = 0;
      frac = e != 0;                  // a nonzero |x| < 1
    end else begin
      ip = 8'(m >> (150 - e));        // e <= 133 in range
      frac = (m & ((24'd1 << (150 - e)) - 1)) != 0;
    end
    if (!x[31]) return $signed({1'b0, ip});
    return frac ? -$signed({1'b0, ip}) - 1 : -$signed({1'b0, ip});
  endfunction

  // fp32 -> int8 code: flush, NaN to 0, round half to even, saturate to [-127, 127] (fp32.q8)
  function automatic logic [7:0] q8(input logic [31:0] x);
    logic [7:0] e;
    logic [31:0] m, ip, rem, half;
    logic [7:0] mag;
    e = x[30:23];
    if (e == 0 || is_nan(x)) return 8'd0;
    if (e >= 134) return x[31] ? 8'h81 : 8'h7F;           // |x| >= 128
    if (e < 126) return 8'd0;                              // |x| < 0.5
    m = {8'd0, 1'b1, x[22:0]};
    ip = m >> (150 - e);
    rem = m & ((32'd1 << (150 - e)) - 1);
    half = 32'd1 << (149 - e);
    if (rem > half || (rem == half && ip[0])) ip = ip + 1;
    mag = ip > 127 ? 8'd127 : 8'(ip);
    return x[31] ? -mag : mag;
  endfunction

  // small signed integer (|i| < 2^24) to fp32, exact
  function automatic logic [31:0] i2f_small(input logic signed [15:0] i);
    logic [15:0] mag;
    logic [4:0] lz;
    logic [31:0] out;
    mag = i[15] ? -i : i;
    if (mag == 0) return 32'd0;
    lz = 0;
    for (int b = 15; b >= 0; b--) if (mag[b]) begin lz = 5'(15 - b); break; end
    out = {i[15], 8'(127 + 15 - lz), 23'(({7'd0, mag} << (lz + 8)) & 23'h7FFFFF)};
    return out;
  endfunction
endpackage

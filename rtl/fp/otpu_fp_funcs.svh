// otpu_fp_funcs.svh: the small fp32 helpers of otpu_core/fp32.py that need no adder or multiplier
// (flush, canonical NaN, the total-order key, max/min, abs, f2i, q8, floor), the constants of the
// composite sequences, included into each module that uses them (plain Verilog-2005 functions,
// so every synthesis front end reads them). Values are 32-bit IEEE binary32 bit patterns.
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
function automatic logic [31:0] exp2_c(input integer k);
  case (k)
    0: exp2_c = 32'h3F800000; 1: exp2_c = 32'h3F317218; 2: exp2_c = 32'h3E75FDE9; 3: exp2_c = 32'h3D63593E;
    4: exp2_c = 32'h3C1D8534; 5: exp2_c = 32'h3AAFE2F6; 6: exp2_c = 32'h3916C07C; default: exp2_c = 32'h37B3C7D6;
  endcase
endfunction

// log2(1 + t) / t: C1..C9 (fp32.LOG2_COEFFS), k = 1..9
function automatic logic [31:0] log2_c(input integer k);
  case (k)
    1: log2_c = 32'h3FB8AA3B; 2: log2_c = 32'hBF38AA38; 3: log2_c = 32'h3EF639EB; 4: log2_c = 32'hBEB8AE27;
    5: log2_c = 32'h3E9369C2; 6: log2_c = 32'hBE74ADF2; 7: log2_c = 32'h3E5CE48E; 8: log2_c = 32'hBE543E8E;
    default: log2_c = 32'h3E00DB73;
  endcase
endfunction

function automatic logic is_nan(input logic [31:0] x);
  is_nan = x[30:23] == 8'hFF && x[22:0] != 0;
endfunction

// denormals become a zero of their sign; everything else keeps its bits (NaN included)
function automatic logic [31:0] ftz(input logic [31:0] x);
  ftz = x[30:23] == 0 ? {x[31], 31'd0} : x;
endfunction

function automatic logic [31:0] canon(input logic [31:0] x);
  canon = is_nan(x) ? CANON_NAN : x;
endfunction

// total-order key of a flushed value: compare keys unsigned
function automatic logic [31:0] key_of(input logic [31:0] x);
  key_of = x[31] ? ~x : (x | 32'h80000000);
endfunction

function automatic logic [31:0] fmax(input logic [31:0] a, input logic [31:0] b);
  fmax = key_of(ftz(a)) > key_of(ftz(b)) ? ftz(a) : ftz(b);
endfunction

function automatic logic [31:0] fmin(input logic [31:0] a, input logic [31:0] b);
  fmin = key_of(ftz(b)) > key_of(ftz(a)) ? ftz(a) : ftz(b);
endfunction

function automatic logic [31:0] fabs(input logic [31:0] x);
  fabs = {1'b0, x[30:23] == 0 ? 31'd0 : x[30:0]};
endfunction

// fp32 -> 32-bit register value, truncating toward zero (RLD)
function automatic logic [31:0] f2i(input logic [31:0] x);
  logic [7:0] e;
  logic [31:0] m, v;
  e = x[30:23];
  m = {8'd0, 1'b1, x[22:0]};
  v = e >= 150 ? m << (e - 150) : m >> (150 - e);
  f2i = e < 127 ? 32'd0 : (e >= 158 ? 32'h80000000 : (x[31] ? -v : v));
endfunction

// fp32 -> int8 code: flush, NaN to 0, round half to even, saturate to [-127, 127] (fp32.q8)
function automatic logic [7:0] q8(input logic [31:0] x);
  logic [7:0] e;
  logic [31:0] m, ip, rem, half;
  logic [7:0] mag;
  e = x[30:23];
  m = {8'd0, 1'b1, x[22:0]};
  ip = m >> (150 - e);
  rem = m & ((32'd1 << (150 - e)) - 1);
  half = 32'd1 << (149 - e);
  if (rem > half || (rem == half && ip[0])) ip = ip + 1;
  mag = ip > 127 ? 8'd127 : ip[7:0];
  if (e == 0 || is_nan(x) || e < 126) q8 = 8'd0;         // zero, NaN, |x| < 0.5
  else if (e >= 134) q8 = x[31] ? 8'h81 : 8'h7F;          // |x| >= 128
  else q8 = x[31] ? -mag : mag;
endfunction

// floor of a flushed fp32 in [-126, 128) as a signed integer (exp2's integer part)
function automatic logic signed [8:0] floor_small(input logic [31:0] x);
  logic [7:0] e, ip;
  logic [23:0] m;
  logic frac;
  e = x[30:23];
  m = {1'b1, x[22:0]};
  ip = e < 127 ? 8'd0 : 8'(m >> (150 - e));
  frac = e < 127 ? e != 0 : (m & ((24'd1 << (150 - e)) - 1)) != 0;
  floor_small = !x[31] ? $signed({1'b0, ip}) : (frac ? -$signed({1'b0, ip}) - 9'sd1 : -$signed({1'b0, ip}));
endfunction

// small signed integer (|i| < 2^15) to fp32, exact
function automatic logic [31:0] i2f_small(input logic signed [15:0] i);
  logic [15:0] mag;
  logic [4:0] lz;
  mag = i[15] ? -i : i;
  lz = 0;
  for (int b = 0; b <= 15; b++) if (mag[b]) lz = 5'(15 - b);     // the highest set bit wins
  i2f_small = mag == 0 ? 32'd0 : {i[15], 8'(127 + 15 - lz), 23'(({7'd0, mag} << (lz + 8)) & 23'h7FFFFF)};
endfunction

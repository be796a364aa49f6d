// otpu_defs.svh: the instruction set as the RTL sees it (otpu_core/isa.py is the definition):
// opcodes, VOP functions, flag bits, units and WAITC queues, error codes, and the footprint ranges
// the window compares; included into each module that uses them.
localparam logic [7:0] OP_NOP = 8'h00, OP_HALT = 8'h01, OP_LI = 8'h02, OP_ADDI = 8'h03, OP_LOOP = 8'h04,
                       OP_BAR = 8'h05, OP_RLD = 8'h06, OP_WAITW = 8'h07, OP_LD = 8'h10, OP_ST = 8'h11,
                       OP_DSTEP = 8'h12, OP_STREAM = 8'h13, OP_MM = 8'h20, OP_QACT = 8'h21, OP_QST = 8'h22,
                       OP_VOP = 8'h30, OP_GATHER = 8'h40;

localparam logic [7:0] V_ADD = 0, V_SUB = 1, V_RSUB = 2, V_MUL = 3, V_MAX = 4, V_MIN = 5, V_OUTER = 6,
                       V_COPY = 8, V_EXP2 = 9, V_RECIP = 10, V_RSQRT = 11, V_ABS = 12, V_FILL = 13,
                       V_EXP2SUB = 14, V_LOG2 = 15, V_RSUM = 16, V_RMAX = 17, V_RSSQ = 18, V_RDOT = 19,
                       V_ARGMAX = 20;
localparam logic [1:0] B_FULL = 0, B_ROW = 1, B_COL = 2, B_SCALAR = 3;

// flags (w0[31:24])
localparam int F_CHAIN = 0;                                    // HALT
localparam int F_RAW = 0, F_MUL = 1;                           // RLD
localparam int F_UNIT = 0, F_ACC = 1, F_RMAX = 2, F_ASCALE = 3, F_PAIR = 6;   // MM; WF = {f[7], f[5:4]}
localparam int F_ROW = 0, F_CSCALE = 1, F_RSCALE = 2, F_DUP = 3, F_SUB = 4;   // QACT
localparam int F_HALF = 1;                                     // QST
localparam int F_DSCALAR = 0, F_DONE = 1;                      // VOP OUTER
localparam logic [2:0] WF_INT8 = 0, WF_INT4 = 1, WF_E2M1 = 2, WF_INT8X = 3, WF_FP4X6 = 4;

// units (isa.Unit) and WAITC queues (isa.Queue)
localparam int NUNITS = 5;
localparam logic [2:0] U_DMA = 0, U_MXU = 1, U_QNT = 2, U_VPU = 3, U_COLL = 4, U_SEQ = 5;
localparam int NQUEUES = 7;
localparam logic [2:0] Q_LD = 0, Q_ST = 1, Q_SE = 2, Q_MXU = 3, Q_QACT = 4, Q_QST = 5, Q_VPU = 6, Q_NONE = 7;

// error codes (otpu_core/rtlbackend.py names them)
localparam logic [7:0] E_NONE = 0, E_OPCODE = 1, E_TMEM_RANGE = 2, E_DRAM_RANGE = 3, E_SHAPE = 4,
                       E_UNSUPPORTED = 5, E_LOOP = 6, E_CHAIN = 7, E_WAITW_TIMEOUT = 8, E_PROGRAM_END = 9;

// footprint: NRANGES ranges [lo, hi) per instruction, {space[1:0], write, lo[AW-1:0], hi[AW-1:0]}
localparam int NRANGES = 6;
localparam int AW = 48;
localparam int RW = 3 + 2 * AW;
localparam logic [1:0] SP_NONE = 0, SP_TMEM = 1, SP_DRAM = 2, SP_ACT = 3;

function automatic logic [2:0] unit_of(input logic [7:0] op);
  case (op)
    OP_LD, OP_ST, OP_WAITW, OP_DSTEP, OP_STREAM: unit_of = U_DMA;
    OP_MM: unit_of = U_MXU;
    OP_QACT, OP_QST: unit_of = U_QNT;
    OP_VOP: unit_of = U_VPU;
    OP_BAR, OP_GATHER: unit_of = U_COLL;
    default: unit_of = U_SEQ;
  endcase
endfunction

function automatic logic [2:0] queue_of(input logic [7:0] op);
  case (op)
    OP_LD, OP_WAITW: queue_of = Q_LD;
    OP_ST: queue_of = Q_ST;
    OP_DSTEP, OP_STREAM: queue_of = Q_SE;
    OP_MM: queue_of = Q_MXU;
    OP_QACT: queue_of = Q_QACT;
    OP_QST: queue_of = Q_QST;
    OP_VOP: queue_of = Q_VPU;
    default: queue_of = Q_NONE;
  endcase
endfunction

function automatic logic [1:0] rng_space(input logic [RW-1:0] r); rng_space = r[RW-1 -: 2]; endfunction
function automatic logic rng_write(input logic [RW-1:0] r); rng_write = r[2 * AW]; endfunction
function automatic logic [AW-1:0] rng_lo(input logic [RW-1:0] r); rng_lo = r[AW +: AW]; endfunction
function automatic logic [AW-1:0] rng_hi(input logic [RW-1:0] r); rng_hi = r[0 +: AW]; endfunction

function automatic logic ranges_overlap(input logic [RW-1:0] a, input logic [RW-1:0] b);
  ranges_overlap = rng_space(a) != SP_NONE && rng_space(a) == rng_space(b) && rng_lo(a) < rng_hi(b) && rng_lo(b) < rng_hi(a);
endfunction

function automatic logic [RW-1:0] mkrange(input logic [1:0] space, input logic write, input logic [AW-1:0] lo,
                                          input logic [AW-1:0] hi);
  mkrange = {hi > lo ? space : SP_NONE, write, lo, hi};
endfunction

// [base, base + (rows - 1) * rs + cols) of a tile (empty when rows or cols is 0)
function automatic logic [RW-1:0] tile(input logic write, input logic [31:0] base, input logic [31:0] rows,
                                       input logic [31:0] cols, input logic [31:0] rs);
  tile = (rows == 0 || cols == 0) ? mkrange(SP_NONE, write, 0, 0)
                                  : mkrange(SP_TMEM, write, AW'(base), AW'(base) + AW'(rows - 1) * AW'(rs) + AW'(cols));
endfunction

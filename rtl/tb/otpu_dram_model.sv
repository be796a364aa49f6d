// otpu_dram_model: the testbench's DRAM behind the core's port: BYTES of storage in BB-byte
// beats, a bandwidth of RATE_Q8/256 bytes per cycle (each request is charged its useful bytes:
// the target's DRAM_BYTES_PER_CYCLE x DRAM_EFFICIENCY) and LATENCY cycles from a request's
// acceptance to its read data or write acknowledgement. Requests are served in order. Every
// written beat is marked dirty so the testbench can dump only what changed.
module otpu_dram_model #(
  parameter int BB = 32,
  parameter longint BYTES = 16 * 1024 * 1024,
  parameter int LATENCY = 30,
  parameter int RATE_Q8 = 6554
) (
  input  logic             clk,
  input  logic             rst,
  input  logic             m_valid,
  input  logic             m_write,
  input  logic [31:0]      m_addr,
  input  logic [BB*8-1:0]  m_wdata,
  input  logic [BB-1:0]    m_wstrb,
  input  logic [15:0]      m_bytes,
  input  logic [2:0]       m_tag,
  output logic             m_ready,
  output logic             r_valid,
  output logic             r_write,
  output logic [2:0]       r_tag,
  output logic [BB*8-1:0]  r_data,
  output logic             range_error,
  output logic [63:0]      read_beats,
  output logic [63:0]      write_beats
);
  localparam longint BEATS = BYTES / BB;
  logic [BB*8-1:0] mem [BEATS];
  logic            dirty [BEATS];
  logic [31:0]     credit;
  localparam int CAP = (BB > 64 ? BB : 64) * 256;

  logic            p_valid [LATENCY];
  logic            p_write [LATENCY];
  logic [2:0]      p_tag [LATENCY];
  logic [BB*8-1:0] p_data [LATENCY];

  assign m_ready = credit >= 32'(m_bytes) * 256;
  assign r_valid = p_valid[LATENCY - 1];
  assign r_write = p_write[LATENCY - 1];
  assign r_tag = p_tag[LATENCY - 1];
  assign r_data = p_data[LATENCY - 1];

  always_ff @(posedge clk) begin
    if (rst) begin
      credit <= CAP;
      range_error <= 1'b0;
      read_beats <= 0;
      write_beats <= 0;
      for (int i = 0; i < LATENCY; i++) p_valid[i] <= 1'b0;
    end else begin
      logic [31:0] c;
      c = credit;
      for (int i = LATENCY - 1; i > 0; i--) begin
        p_valid[i] <= p_valid[i - 1];
        p_write[i] <= p_write[i - 1];
        p_tag[i] <= p_tag[i - 1];
        p_data[i] <= p_data[i - 1];
      end
      p_valid[0] <= 1'b0;
      if (m_valid && m_ready) begin
        c = c - 32'(m_bytes) * 256;
        p_valid[0] <= 1'b1;
        p_write[0] <= m_write;
        p_tag[0] <= m_tag;
        if (longint'(m_addr / BB) >= BEATS) range_error <= 1'b1;
        else if (m_write) begin
          logic [BB*8-1:0] v;
          v = mem[m_addr / BB];
          for (int b = 0; b < BB; b++) if (m_wstrb[b]) v[8 * b +: 8] = m_wdata[8 * b +: 8];
          mem[m_addr / BB] <= v;
          dirty[m_addr / BB] <= 1'b1;
          write_beats <= write_beats + 1;
        end else begin
          p_data[0] <= mem[m_addr / BB];
          read_beats <= read_beats + 1;
        end
      end
      c = c + RATE_Q8;
      credit <= c > CAP ? CAP : c;
    end
  end
endmodule
